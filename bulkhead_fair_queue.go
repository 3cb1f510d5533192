package ratelimit

import "slices"

// maxClassPasses bounds how long the lowest waiting class waits behind
// higher ones in a class-ordered queue: once this many grants in a row have
// gone to higher classes while it waited, its next grant comes first (when
// it may take one at all: see classQueues.pick).
const maxClassPasses = 8

// classQueues is the queue of waits behind the fair bulkheads and Fair's
// WaitN: one round of tenants per class, one FIFO per tenant within a
// class. It holds no lock; its owner guards it.
//
// Its rules:
//
//  1. Service goes to the highest class with waits (lowest index), except
//     that after maxClassPasses grants in a row to other classes while
//     the lowest class with waits had waits, that class goes next.
//  2. Within a class, tenants with waits take turns round-robin, FIFO
//     within a tenant; a tenant with no wait queued in a class joins that
//     class's round at its back, just before the tenant whose turn is
//     next. So the k-th queued wait of a tenant in a class is granted
//     after at most k grants to each other tenant of that class.
//  3. Memory follows what is queued: a tenant's FIFO is dropped as soon as
//     it is empty, and the bounds per tenant (all classes counted) and in
//     total cap the rest.
type classQueues[W comparable] struct {
	perTenant int // 0: no bound per tenant
	total     int // 0: no bound in total
	classes   []classRound[W]
	tenants   map[string]int // waits queued per tenant, all classes; none at 0
	n         int
	passes    int // grants in a row not to the lowest class with waits
}

// classRound is one class's tenants with waits, in turn order.
type classRound[W comparable] struct {
	ring     []*tenantFIFO[W]
	turn     int // index in ring of the next to serve
	byTenant map[string]*tenantFIFO[W]
	n        int
}

// tenantFIFO is one tenant's waits in one class, oldest first.
type tenantFIFO[W comparable] struct {
	tenant string
	ws     []W
}

func newClassQueues[W comparable](classes, perTenant, total int) *classQueues[W] {
	return &classQueues[W]{perTenant: perTenant, total: total, classes: make([]classRound[W], classes)}
}

// full reports whether a wait of tenant may not be queued: the total or
// the tenant's bound is reached.
func (q *classQueues[W]) full(tenant string) (total, perTenant bool) {
	return q.total > 0 && q.n >= q.total, q.perTenant > 0 && q.tenants[tenant] >= q.perTenant
}

// push queues w for tenant in class c, which the caller checked with full.
func (q *classQueues[W]) push(c int, tenant string, w W) {
	r := &q.classes[c]
	f := r.byTenant[tenant]
	if f == nil {
		if r.byTenant == nil {
			r.byTenant = make(map[string]*tenantFIFO[W])
		}
		f = &tenantFIFO[W]{tenant: tenant}
		r.byTenant[tenant] = f
		r.ring = slices.Insert(r.ring, r.turn, f)
		if len(r.ring) > 1 {
			r.turn++
		}
	}
	f.ws = append(f.ws, w)
	r.n++
	if q.tenants == nil {
		q.tenants = make(map[string]int)
	}
	q.tenants[tenant]++
	q.n++
}

// aheadOf reports whether a wait of class c or higher is queued: one a new
// call of class c must not overtake.
func (q *classQueues[W]) aheadOf(c int) bool {
	for i := 0; i <= c && i < len(q.classes); i++ {
		if q.classes[i].n > 0 {
			return true
		}
	}
	return false
}

// bounds returns the highest and the lowest class with waits; q must not
// be empty.
func (q *classQueues[W]) bounds() (hi, lo int) {
	hi, lo = -1, -1
	for i := range q.classes {
		if q.classes[i].n > 0 {
			if hi < 0 {
				hi = i
			}
			lo = i
		}
	}
	return hi, lo
}

// pick returns the class to serve next (rule 1), given may, which says
// whether the head of a class may be granted now, or false if none may:
// the lowest class with waits if it is owed its turn and may; else the
// highest class with waits that may. So a class is served ahead of a
// higher one only on its owed turn or while the higher one may not be.
func (q *classQueues[W]) pick(may func(c int) bool) (int, bool) {
	if q.n == 0 {
		return 0, false
	}
	hi, lo := q.bounds()
	if lo != hi && q.passes >= maxClassPasses && may(lo) {
		return lo, true
	}
	for c := hi; c <= lo; c++ {
		if q.classes[c].n > 0 && may(c) {
			return c, true
		}
	}
	return 0, false
}

// head returns the wait that pop(c) would take; class c must have waits.
func (q *classQueues[W]) head(c int) W {
	r := &q.classes[c]
	return r.ring[r.turn].ws[0]
}

// pop takes the next wait of class c, which must have waits, and moves the
// class's turn on (rule 2).
func (q *classQueues[W]) pop(c int) W {
	_, lo := q.bounds()
	if c == lo {
		q.passes = 0
	} else {
		q.passes++
	}
	r := &q.classes[c]
	f := r.ring[r.turn]
	w := f.ws[0]
	var zero W
	f.ws[0] = zero
	f.ws = f.ws[1:]
	q.took(c, f.tenant)
	if len(f.ws) == 0 {
		r.drop(f)
	} else {
		r.turn = (r.turn + 1) % len(r.ring)
	}
	return w
}

// remove takes w, queued for tenant in class c, out of the queue; it
// reports false if w is not there. Its cost is linear in the tenant's
// waits in that class, which the bound per tenant caps.
func (q *classQueues[W]) remove(c int, tenant string, w W) bool {
	r := &q.classes[c]
	f := r.byTenant[tenant]
	if f == nil {
		return false
	}
	i := slices.Index(f.ws, w)
	if i < 0 {
		return false
	}
	f.ws = slices.Delete(f.ws, i, i+1)
	q.took(c, tenant)
	if len(f.ws) == 0 {
		r.drop(f)
	}
	if q.n == 0 {
		q.passes = 0
	}
	return true
}

// took counts one wait of tenant in class c gone.
func (q *classQueues[W]) took(c int, tenant string) {
	q.classes[c].n--
	q.n--
	if k := q.tenants[tenant] - 1; k > 0 {
		q.tenants[tenant] = k
	} else {
		delete(q.tenants, tenant)
	}
}

// drop takes the empty FIFO f out of the round, keeping the turn on the
// tenant that follows it.
func (r *classRound[W]) drop(f *tenantFIFO[W]) {
	i := slices.Index(r.ring, f)
	r.ring = slices.Delete(r.ring, i, i+1)
	delete(r.byTenant, f.tenant)
	if i < r.turn {
		r.turn--
	}
	if r.turn >= len(r.ring) {
		r.turn = 0
	}
}
