package runtime

// inBatches calls flush with what ch holds, batch by batch, until ch is closed and
// empty: each batch is the next value and whatever else is already buffered, up to
// size. Whatever arrives while flush runs goes in the next batch, so a slow flush makes
// batches larger, not more numerous. The completer and the events publisher both
// record this way.
func inBatches[T any](ch <-chan T, size int, flush func([]T)) {
	batch := make([]T, 0, size)
	for v := range ch {
		batch = append(batch[:0], v)
	more:
		for len(batch) < cap(batch) {
			select {
			case v, ok := <-ch:
				if !ok {
					break more
				}
				batch = append(batch, v)
			default:
				break more
			}
		}
		flush(batch)
	}
}
