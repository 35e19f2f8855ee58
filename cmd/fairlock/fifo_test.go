package main

import (
	"reflect"
	"testing"
)

func TestCheckFIFO(t *testing.T) {
	tests := []struct {
		name                 string
		arrival, acquisition []string
		want                 []fifoViolation
	}{
		{name: "in order", arrival: []string{"w1", "w2", "w3"}, acquisition: []string{"w1", "w2", "w3"}},
		{name: "two swapped", arrival: []string{"w1", "w2", "w3", "w4"}, acquisition: []string{"w1", "w3", "w2", "w4"},
			want: []fifoViolation{{Position: 2, Expected: "w2", Got: "w3"}, {Position: 3, Expected: "w3", Got: "w2"}}},
		{name: "last barged in first", arrival: []string{"w1", "w2", "w3"}, acquisition: []string{"w3", "w1", "w2"},
			want: []fifoViolation{{1, "w1", "w3"}, {2, "w2", "w1"}, {3, "w3", "w2"}}},
		{name: "one never acquired", arrival: []string{"w1", "w2", "w3"}, acquisition: []string{"w1", "w2"},
			want: []fifoViolation{{Position: 3, Expected: "w3", Got: ""}}},
		{name: "a stranger acquired", arrival: []string{"w1"}, acquisition: []string{"w1", "x"},
			want: []fifoViolation{{Position: 2, Expected: "", Got: "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkFIFO(tc.arrival, tc.acquisition); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("checkFIFO = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCheckSnapshots(t *testing.T) {
	// Tokens 11..15 went to a, b, c, a, b.
	acquiredBy := map[int64]string{11: "a", 12: "b", 13: "c", 14: "a", 15: "b"}
	tests := []struct {
		name        string
		snaps       []queueSnapshot
		wantChecked int
		want        []fifoViolation
	}{
		{name: "consistent", wantChecked: 5, snaps: []queueSnapshot{
			{Token: 10, Queue: []string{"a", "b", "c"}},
			{Token: 12, Queue: []string{"c", "a", "b"}},
		}},
		{name: "beyond the run is not checked", wantChecked: 1, snaps: []queueSnapshot{
			{Token: 15, Queue: []string{"c"}}, // token 16 never happened
			{Token: 14, Queue: []string{"b"}},
		}},
		{name: "head overtaken", wantChecked: 3, snaps: []queueSnapshot{
			{Token: 11, Queue: []string{"c", "b"}}, // b got 12 and c 13: c was first in line
			{Token: 13, Queue: []string{"a"}},
		}, want: []fifoViolation{{Position: 12, Expected: "c", Got: "b"}, {Position: 13, Expected: "b", Got: "c"}}},
		{name: "one violation seen twice counts once", wantChecked: 2, snaps: []queueSnapshot{
			{Token: 13, Queue: []string{"b", "a"}},
			{Token: 13, Queue: []string{"b"}},
		}, want: []fifoViolation{{Position: 14, Expected: "b", Got: "a"}, {Position: 15, Expected: "a", Got: "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checked, got := checkSnapshots(tc.snaps, acquiredBy)
			if checked != tc.wantChecked || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("checkSnapshots = %d, %+v; want %d, %+v", checked, got, tc.wantChecked, tc.want)
			}
		})
	}
}
