package manifesttest

var cloudRunTypes = map[string]func() any{}
