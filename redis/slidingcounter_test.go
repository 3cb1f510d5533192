package redis

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestLuaCounterMath checks earliest and remaining, whose quotients come
// from a floating-point estimate corrected by exact comparisons, against
// math/big, with operands chosen to land on and around exact quotients.
func TestLuaCounterMath(t *testing.T) {
	c := newClient(t, redisAddr(t), true)
	rng := rand.New(rand.NewPCG(9, 9))
	for _, wl := range [][2]int64{{int64(maxSpan), 1 << 40}, {int64(maxSpan) - 1, 1<<40 - 3}, {1e9, 1 << 40}, {999_999_937, 12345}, {7, 4}} {
		W, L := wl[0], wl[1]
		type ecase struct{ prev, count, e0 int64 }
		type rcase struct{ s, prev, cur int64 }
		var es []ecase
		var rs []rcase
		// Divisors of W as prev make prev*(W-e)/W exact integers, where a
		// rounded estimate is most likely to land one too high.
		var divs []int64
		for d := int64(1); d <= min(L, 1_000_000); d++ {
			if W%d == 0 {
				divs = append(divs, d)
			}
		}
		for i := range 300 {
			prev := 1 + rng.Int64N(L)
			if i%2 == 0 {
				prev = divs[rng.IntN(len(divs))]
			}
			count := rng.Int64N(L + 1)
			es = append(es, ecase{prev, count, rng.Int64N(W)})
			// W - e near a multiple of W/prev: prev*(W-e)/W near an integer.
			j := rng.Int64N(prev + 1)
			x := new(big.Int).Mul(big.NewInt(W), big.NewInt(j))
			x.Quo(x, big.NewInt(prev))
			e := W - x.Int64() + rng.Int64N(3) - 1
			e = min(max(e, 0), W-1)
			rs = append(rs, rcase{-e, prev, rng.Int64N(L + 1)})
		}
		var args []any
		args = append(args, W, L)
		for _, e := range es {
			args = append(args, e.prev, e.count, e.e0)
		}
		for _, r := range rs {
			args = append(args, r.s, r.prev, r.cur)
		}
		v := evalHelpers(t, c, 0, luaSWCMath+"W, L = tonumber(ARGV[6]), tonumber(ARGV[7])\n", `
local out, m = {}, tonumber(ARGV[8])
local i = 9
for _ = 1, m do
  out[#out + 1] = earliest(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  i = i + 3
end
while i <= #ARGV do
  out[#out + 1] = remaining(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  i = i + 3
end
return out`, append([]any{args[0], args[1], len(es)}, args[2:]...)...)
		bW, bL := big.NewInt(W), big.NewInt(L)
		for i, e := range es {
			// k = floor((L-count)*W / prev); earliest = max(e0, W-k) if k < W.
			k := new(big.Int).Mul(new(big.Int).Sub(bL, big.NewInt(e.count)), bW)
			k.Quo(k, big.NewInt(e.prev))
			want := e.e0
			if k.Cmp(bW) < 0 {
				want = max(e.e0, W-k.Int64())
			}
			if got := v[i].(int64); got != want {
				t.Errorf("W %d L %d: earliest(%d, %d, %d) = %d, want %d", W, L, e.prev, e.count, e.e0, got, want)
			}
		}
		for i, r := range rs {
			// q = ceil(prev*(W-e)/W); remaining = max(L - cur - q, 0).
			p := new(big.Int).Mul(big.NewInt(r.prev), big.NewInt(W+r.s))
			q, m := new(big.Int).QuoRem(p, bW, new(big.Int))
			if m.Sign() > 0 {
				q.Add(q, big.NewInt(1))
			}
			want := max(L-r.cur-q.Int64(), 0)
			if got := v[len(es)+i].(int64); got != want {
				t.Errorf("W %d L %d: remaining(%d, %d, %d) = %d, want %d", W, L, r.s, r.prev, r.cur, got, want)
			}
		}
	}
}
