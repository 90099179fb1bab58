package main

import "testing"

// TestRuns runs the example end to end (it exits the test binary on failure).
func TestRuns(t *testing.T) { main() }
