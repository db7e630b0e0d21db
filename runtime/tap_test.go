package runtime

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestTapFollowsBoundedAndEnds(t *testing.T) {
	tap := NewTap()
	got, done := tap.Read([2]int64{}, 10)
	if done || len(got[0].Data) != 0 || len(got[1].Data) != 0 {
		t.Fatalf("empty tap: %+v %v", got, done)
	}
	tap.Writer(Stdout).Write([]byte("hello "))
	tap.Writer(Stderr).Write([]byte("warn"))
	got, _ = tap.Read([2]int64{}, 4)
	if string(got[0].Data) != "hell" || string(got[1].Data) != "warn" {
		t.Fatalf("read: %+v", got)
	}
	got, _ = tap.Read([2]int64{4, 4}, 100)
	if string(got[0].Data) != "o " || got[0].Offset != 4 || len(got[1].Data) != 0 || got[1].Offset != 4 {
		t.Fatalf("read from offsets: %+v", got)
	}

	// A waiting reader wakes on a write.
	woke := make(chan struct{})
	go func() { tap.Wait(context.Background(), [2]int64{6, 4}); close(woke) }()
	select {
	case <-woke:
		t.Fatal("Wait returned with nothing new")
	case <-time.After(50 * time.Millisecond):
	}
	tap.Writer(Stdout).Write([]byte("world"))
	<-woke

	// Past TapKeep, the oldest bytes go and a reader learns how many it
	// missed.
	big := bytes.Repeat([]byte("x"), TapKeep)
	tap.Writer(Stdout).Write(big)
	got, _ = tap.Read([2]int64{0, 0}, 8)
	if got[0].Offset != 11 || got[0].Skipped != 11 || string(got[0].Data) != "xxxxxxxx" {
		t.Fatalf("after overflow: offset %d skipped %d %q", got[0].Offset, got[0].Skipped, got[0].Data)
	}

	// Close wakes waiters and reports done.
	go func() { time.Sleep(20 * time.Millisecond); tap.Close() }()
	tap.Wait(context.Background(), [2]int64{11 + TapKeep, 4})
	if _, done := tap.Read([2]int64{}, 1); !done {
		t.Fatal("not done after Close")
	}
}

func TestTapStartAndDone(t *testing.T) {
	tap := NewTap()
	if !tap.Started().IsZero() || tap.Done() {
		t.Fatal("a new tap reads as started or done")
	}
	tap.Start()
	first := tap.Started()
	if first.IsZero() {
		t.Fatal("Start recorded nothing")
	}
	tap.Start() // a second call keeps the first time
	if !tap.Started().Equal(first) {
		t.Fatal("a second Start moved the start")
	}
	tap.Close()
	if !tap.Done() {
		t.Fatal("a closed tap is not done")
	}
}

// A run withdrawn while it waits for its slot is refused by Start; one
// that has started cannot be withdrawn.
func TestTapWithdraw(t *testing.T) {
	waiting := NewTap()
	if !waiting.Withdraw() {
		t.Fatal("a run waiting for its slot could not be withdrawn")
	}
	if waiting.Start() {
		t.Fatal("Start accepted a withdrawn run")
	}
	if !waiting.Started().IsZero() {
		t.Fatal("a withdrawn run reads as started")
	}
	running := NewTap()
	if !running.Start() {
		t.Fatal("Start refused a run never withdrawn")
	}
	if running.Withdraw() {
		t.Fatal("a started run was withdrawn")
	}
	if !running.Start() || running.Started().IsZero() {
		t.Fatal("a failed Withdraw stopped a started run")
	}
}
