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
}
