package exact

import "testing"

func TestIntervalExact(t *testing.T) {
	iv := NewInterval(1e9, 3) // 333,333,333⅓ ns
	var t0 Time
	t1 := iv.Add(t0, 1)
	if t1 != (Time{333333333, 1}) {
		t.Fatalf("one interval = %+v", t1)
	}
	t3 := iv.Add(iv.Add(t1, 1), 1)
	if t3 != (Time{1e9, 0}) {
		t.Fatalf("three intervals = %+v, want exactly 1s", t3)
	}
	big := iv.Add(t0, 3_000_000)
	if big != (Time{1e15, 0}) {
		t.Fatalf("3e6 intervals = %+v, want exactly 1e6 s", big)
	}
	if back := iv.Sub(big, 3_000_000); back != t0 {
		t.Fatalf("sub = %+v, want zero", back)
	}
	if n := iv.Count(Time{1e9, 0}); n != 3 {
		t.Fatalf("count(1s) = %d, want 3", n)
	}
	if n := iv.Count(Time{999999999, 2}); n != 2 {
		t.Fatalf("count(1s - 1/3ns) = %d, want 2", n)
	}
	if n := iv.Count(Time{-1, 2}); n != 0 {
		t.Fatalf("count(negative) = %d, want 0", n)
	}
	d := iv.Diff(Time{5, 0}, Time{3, 2})
	if d != (Time{1, 1}) {
		t.Fatalf("diff = %+v, want {1 1}", d)
	}
}
