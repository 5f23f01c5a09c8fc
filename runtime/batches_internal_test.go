package runtime

import (
	"slices"
	"testing"
)

// inBatches hands over every value once, in order, in batches of what was buffered, no
// larger than size, and returns once the channel is closed and empty.
func TestInBatches(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 10)
	for i := range 7 {
		ch <- i
	}
	close(ch)
	var got [][]int
	inBatches(ch, 3, func(b []int) { got = append(got, slices.Clone(b)) })
	want := [][]int{{0, 1, 2}, {3, 4, 5}, {6}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A value sent while a flush runs goes in the next batch, with what else came meanwhile.
func TestInBatchesTakesWhatCameDuringAFlush(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 10)
	ch <- 0
	var got [][]int
	inBatches(ch, 8, func(b []int) {
		got = append(got, slices.Clone(b))
		if len(got) == 1 {
			ch <- 1
			ch <- 2
			close(ch)
		}
	})
	want := [][]int{{0}, {1, 2}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
