package keystore

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// The directory's pages against a model: random changes of entries and
// doublings, as splits make them, from one entry to 2^14 (64 pages).
// After each step every entry is what the model says; a directory
// replaced by its doubling never changes again (readers may still hold
// it); a doubling of whole pages copies no entry (its pages are the old
// ones, each named twice); and a change copies at most the one page it
// writes in, and only a page the directory does not own.
func TestDirectoryPages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shards := make([]*shard[int], 64)
	for i := range shards {
		shards[i] = &shard[int]{}
	}
	entries := func(d *directory[int]) []*shard[int] {
		out := make([]*shard[int], d.mask+1)
		for i := range out {
			out[i] = d.at(uint64(i))
		}
		return out
	}
	type frozen struct {
		d    *directory[int]
		want []*shard[int]
	}
	var old []frozen
	d := newDirectory[int](1)
	d.set(0, shards[0])
	model := []*shard[int]{shards[0]}
	for step := range 3000 {
		if len(model) < 1<<12 && rng.IntN(40) == 0 {
			pages := make([]*dirPageOf[int], len(d.pages))
			for j := range pages {
				pages[j] = d.pages[j].Load()
			}
			nd, wrote := d.doubled()
			n := len(model)
			if n >= dirPage {
				if wrote != 2*len(pages) {
					t.Fatalf("step %d: doubling %d entries wrote %d, want %d page pointers", step, n, wrote, 2*len(pages))
				}
				for j := range nd.pages {
					if nd.pages[j].Load() != pages[j%len(pages)] || nd.owned[j] {
						t.Fatalf("step %d: page %d of the doubled directory is not old page %d, shared", step, j, j%len(pages))
					}
				}
			} else if wrote > dirPage {
				t.Fatalf("step %d: doubling %d entries wrote %d", step, n, wrote)
			}
			old = append(old, frozen{d, entries(d)})
			d = nd
			model = append(model, model...)
		} else {
			i := uint64(rng.IntN(len(model)))
			sh := shards[rng.IntN(len(shards))]
			j := i >> dirPageBits
			owned := d.owned[j]
			pages := make([]*dirPageOf[int], len(d.pages))
			for k := range pages {
				pages[k] = d.pages[k].Load()
			}
			wrote := d.set(i, sh)
			model[i] = sh
			switch {
			case owned && wrote != 1:
				t.Fatalf("step %d: a change in an owned page wrote %d entries", step, wrote)
			case !owned && wrote != 1+dirPage:
				t.Fatalf("step %d: a change in a shared page wrote %d entries, want the page and 1", step, wrote)
			}
			for k := range pages {
				if changed := d.pages[k].Load() != pages[k]; changed != (!owned && uint64(k) == j) {
					t.Fatalf("step %d: page %d replaced: %v (entry %d, its page owned: %v)", step, k, changed, i, owned)
				}
			}
		}
		got := entries(d)
		for i := range model {
			if got[i] != model[i] {
				t.Fatalf("step %d: entry %d is not the model's", step, i)
			}
		}
		if step%20 != 0 && step != 2999 {
			continue
		}
		for k, f := range old {
			for i, e := range entries(f.d) {
				if e != f.want[i] {
					t.Fatalf("step %d: directory %d (of %d entries), replaced, changed at entry %d", step, k, len(f.want), i)
				}
			}
		}
	}
	if len(model) < 4*dirPage {
		t.Fatalf("the directory reached %d entries only", len(model))
	}
}

// Readers of the directory while splits change it and double it: every
// entry a reader finds names a shard (a page is filled before it is
// published), whichever directory the reader holds. Run with -race, it
// also checks that readers and the writer touch the pages atomically.
func TestDirectoryConcurrentReaders(t *testing.T) {
	shards := make([]*shard[int], 16)
	for i := range shards {
		shards[i] = &shard[int]{}
	}
	var cur atomic.Pointer[directory[int]]
	d := newDirectory[int](1)
	d.set(0, shards[0])
	cur.Store(d)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 100 {
					if cur.Load().at(rng.Uint64()) == nil {
						bad.Add(1)
					}
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200_000 {
		d := cur.Load()
		if d.mask < 1<<12-1 && rng.IntN(5000) == 0 {
			nd, _ := d.doubled()
			cur.Store(nd)
			continue
		}
		d.set(uint64(rng.IntN(int(d.mask+1))), shards[rng.IntN(len(shards))])
	}
	close(stop)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("readers found %d entries naming no shard", n)
	}
	if cur.Load().mask < 4*dirPage-1 {
		t.Fatalf("the directory reached %d entries only", cur.Load().mask+1)
	}
}
