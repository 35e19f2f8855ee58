package lock

import (
	"testing"
	"time"
)

func TestServerFloor(t *testing.T) {
	var f serverFloor
	now := time.Now()
	if got := f.at(now); got != 0 {
		t.Errorf("no reference: %d, want 0 (no limit)", got)
	}
	server := time.UnixMilli(1_800_000_000_000)
	f.observe(server.UnixMicro(), now)
	if got, want := f.at(now.Add(2*time.Second)), server.Add(2*time.Second-floorMargin).UnixMilli(); got != want {
		t.Errorf("2 s after the reply: %d, want %d (the reference, the time since, less the margin)", got, want)
	}
	if got, want := f.at(now.Add(-time.Second)), server.Add(-time.Second-floorMargin).UnixMilli(); got != want {
		t.Errorf("before the reply: %d, want %d", got, want)
	}
	if got := f.at(now.Add(floorMaxAge + time.Millisecond)); got != 0 {
		t.Errorf("reference older than floorMaxAge: %d, want 0", got)
	}
	f.observe(server.Add(-time.Hour).UnixMicro(), now.Add(-time.Second))
	if got, want := f.at(now), server.Add(-floorMargin).UnixMilli(); got != want {
		t.Errorf("an older reply replaced the reference: %d, want %d", got, want)
	}
	f.observe(0, now.Add(time.Second))
	if got, want := f.at(now), server.Add(-floorMargin).UnixMilli(); got != want {
		t.Errorf("a reply without the server's time replaced the reference: %d, want %d", got, want)
	}
	// A later reply that was 3 s on its way bounds the server's clock
	// lower than the reference does: it is not taken (the simulation's
	// leaves dated before they were sent).
	f.observe(server.Add(time.Second).UnixMicro(), now.Add(4*time.Second))
	if got, want := f.at(now.Add(4*time.Second)), server.Add(4*time.Second-floorMargin).UnixMilli(); got != want {
		t.Errorf("a reply long on its way lowered the bound: %d, want %d", got, want)
	}
	// A later reply that bounds it higher is.
	f.observe(server.Add(5*time.Second).UnixMicro(), now.Add(5*time.Second-time.Millisecond))
	if got, want := f.at(now.Add(5*time.Second)), server.Add(5*time.Second+time.Millisecond-floorMargin).UnixMilli(); got != want {
		t.Errorf("a reply that bounds the server's clock higher: %d, want %d", got, want)
	}
	// Past half its usable age the reference is replaced by any reply,
	// even one that bounds the clock lower, so that it never runs out
	// while replies come.
	late := now.Add(5*time.Second + floorMaxAge/2 + time.Second)
	f.observe(server.Add(30*time.Second).UnixMicro(), late)
	if got, want := f.at(late), server.Add(30*time.Second-floorMargin).UnixMilli(); got != want {
		t.Errorf("a reply after half the usable age: %d, want %d", got, want)
	}
}
