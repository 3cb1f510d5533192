package main

import (
	"github.com/ratelimitkit/ratelimit/internal/accesslog"
	"github.com/ratelimitkit/ratelimit/internal/replay"
)

// pipe is a sink that prepares each request (keys and classes) on the
// reading goroutine and hands the prepared requests, in batches and in
// order, to a goroutine that decides them: reading and parsing overlap
// the rules' decisions, on a second core when there is one.
type pipe struct {
	r     *replay.Replayer
	batch []item
	full  chan []item
	free  chan []item
	done  chan struct{}
}

type item struct {
	file string
	line int64
	p    replay.Prepared
	err  error // a malformed line
}

const batchLen = 512

func newPipe(r *replay.Replayer) *pipe {
	p := &pipe{r: r, full: make(chan []item, 4), free: make(chan []item, 5), done: make(chan struct{})}
	for range 5 {
		p.free <- make([]item, 0, batchLen)
	}
	p.batch = <-p.free
	go func() {
		defer close(p.done)
		for b := range p.full {
			for i := range b {
				it := &b[i]
				if it.err != nil {
					r.Malformed(it.file, it.line, it.err)
				} else {
					r.AddPrepared(it.file, it.line, it.p)
				}
			}
			clear(b)
			p.free <- b[:0]
		}
	}()
	return p
}

func (p *pipe) push(it item) {
	p.batch = append(p.batch, it)
	if len(p.batch) == batchLen {
		p.full <- p.batch
		p.batch = <-p.free
	}
}

func (p *pipe) Add(file string, line int64, e *accesslog.Entry) {
	p.push(item{file: file, line: line, p: p.r.Prepare(e)})
}

func (p *pipe) Malformed(file string, line int64, err error) {
	p.push(item{file: file, line: line, err: err})
}

// close decides what is left and waits until every request is decided.
func (p *pipe) close() {
	if len(p.batch) > 0 {
		p.full <- p.batch
	}
	close(p.full)
	<-p.done
}
