package main

import (
	"testing"

	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
