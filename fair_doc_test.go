package ratelimit

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// fairPicture renders the share per tenant over time for docs/fairness.md:
// a fixed window of 40 per second shared by a flooder (400 asks a second
// in windows 2 to 5) and three tenants asking 10, 10 and 5 a second, one
// bar cell per 2 events allowed.
func fairPicture(t *testing.T) string {
	const n, windows = 40, 9
	sec := int64(1e9)
	var asks []fairAsk
	for w := range windows {
		if w >= 2 && w <= 5 {
			for j := range 400 {
				asks = append(asks, fairAsk{int64(w)*sec + int64(j)*(sec/400), 0})
			}
		}
		for i := 1; i <= 3; i++ {
			k := 10
			if i == 3 {
				k = 5
			}
			for j := range k {
				asks = append(asks, fairAsk{int64(w)*sec + int64(i)*1e6 + int64(j)*(sec/int64(k)), i})
			}
		}
	}
	demand, got, _, _ := fairRun(t, "fixed", n, 4, windows, asks)
	var b strings.Builder
	b.WriteString("window  flooder               a          b          c        refused\n")
	for w := range windows {
		refused := 0
		fmt.Fprintf(&b, "%-6d", w)
		for i := range 4 {
			refused += demand[w][i] - got[w][i]
			width := 10
			if i == 0 {
				width = 20
			}
			fmt.Fprintf(&b, "  %-*s", width, strings.Repeat("#", got[w][i]/2)+" "+fmt.Sprint(got[w][i]))
		}
		fmt.Fprintf(&b, "  %d\n", refused)
	}
	return b.String()
}

// TestFairnessDocPicture checks the picture in docs/fairness.md against
// the run that draws it.
func TestFairnessDocPicture(t *testing.T) {
	doc, err := os.ReadFile("docs/fairness.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- fair picture: fair_doc_test.go -->\n```\n", "```\n"
	s := string(doc)
	i := strings.Index(s, begin)
	if i < 0 {
		t.Fatal("docs/fairness.md has no picture block")
	}
	s = s[i+len(begin):]
	j := strings.Index(s, end)
	if j < 0 {
		t.Fatal("the picture block is not closed")
	}
	if want := fairPicture(t); s[:j] != want {
		t.Errorf("docs/fairness.md's picture is not what the code draws; it draws:\n%s", want)
	}
}
