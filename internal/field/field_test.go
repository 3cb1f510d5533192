package field

import (
	"testing"
	"time"
)

func TestCeilSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{1<<63 - 1, 9223372037},
	} {
		if got := CeilSeconds(c.d); got != c.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"":          `""`,
		"api":       `"api"`,
		`a"b\c`:     `"a\"b\\c"`,
		"caf\u00e9": `"caf??"`,
		"a\nb":      `"a?b"`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestPolicyItem(t *testing.T) {
	if got, want := PolicyItem(`"api"`, 10, 1500*time.Millisecond), `"api";q=10;w=2`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got, want := PolicyItem(`"api"`, 10, 0), `"api";q=10`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
