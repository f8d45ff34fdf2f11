package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/bus/wire"
)

// relay is one data stream: a TCP connection to a publisher and the
// POST /bus/v1/streams/{id} request carrying its bytes.
type relay struct {
	s      *session
	id     string
	target string      // host:port, or an announced backend
	wt     wire.Target // as commanded
	cancel context.CancelFunc
	// quiet is set when the router ended the stream (unsubscribe, or the
	// session's end): no stream_closed is owed then.
	quiet atomic.Bool
}

// stop ends the relay; report says whether the router should hear a
// stream_closed.
func (r *relay) stop(report bool) {
	if !report {
		r.quiet.Store(true)
	}
	r.cancel()
}

// closed tells the router the stream ended on this side (unless the
// router ended it) and lets the session forget it.
//
// The id is handed back before stream_closed is sent, so a subscribe the
// router sends in answer finds the slot free.
func (r *relay) closed(code string) {
	select {
	case r.s.closedStreams <- r.id:
	case <-r.s.ended:
	}
	if !r.quiet.Load() {
		r.s.send(wire.Message{Type: wire.TypeStreamClosed, StreamID: r.id, Code: code})
	}
}

func (r *relay) run(ctx context.Context) {
	a := r.s.a
	dctx, dcancel := context.WithTimeout(ctx, DialTimeout)
	conn, err := a.dial(dctx, r)
	dcancel()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("publisher unreachable", "stream", r.id, "target", r.target, "error", err)
			a.met.StreamOpens.WithLabelValues(wire.CodeUnreachable).Inc()
		}
		r.closed(wire.CodeUnreachable)
		return
	}
	var once sync.Once
	closeConn := func() { once.Do(func() { conn.Close() }) }
	defer closeConn()
	// Cancelling the relay closes the publisher connection, which ends
	// both copies.
	stopWatch := context.AfterFunc(ctx, closeConn)
	defer stopWatch()

	// The publisher's end ends the request body; the router then ends
	// the response. A router that does not is cut off after CloseGrace
	// (cancelling at once could drop the publisher's last bytes).
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var graceOnce sync.Once
	var grace *time.Timer
	defer func() {
		graceOnce.Do(func() {})
		if grace != nil {
			grace.Stop()
		}
	}()
	ended := func() { graceOnce.Do(func() { grace = time.AfterFunc(CloseGrace, scancel) }) }
	body := &pubReader{conn: conn, closeConn: closeConn, ended: ended, bytes: a.met.Bytes.WithLabelValues("to_router")}
	req, err := a.newRequest(sctx, wire.StreamPathPrefix+r.id, body)
	if err != nil {
		a.met.StreamOpens.WithLabelValues("failed").Inc()
		r.closed("failed")
		return
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	openTimer := time.AfterFunc(StreamOpenTimeout, func() { closeConn(); scancel() })
	resp, err := a.hc.Do(req)
	openTimer.Stop()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("data stream not opened", "stream", r.id, "error", err)
			a.met.StreamOpens.WithLabelValues("failed").Inc()
		}
		r.closed("failed")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		code := refusalCode(resp.Body)
		a.log.Warn("the router refused the data stream", "stream", r.id, "status", resp.StatusCode, "code", code)
		a.met.StreamOpens.WithLabelValues("refused").Inc()
		r.closed("refused")
		return
	}
	a.met.StreamOpens.WithLabelValues("opened").Inc()
	a.log.Debug("stream relaying", "stream", r.id, "target", r.target)

	// Router → publisher, through one bounded buffer; publisher → router
	// is the request body, read by the HTTP/2 transport under the
	// router's flow-control window.
	buf := make([]byte, r.s.bufSize)
	toPub := a.met.Bytes.WithLabelValues("to_publisher")
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				break
			}
			toPub.Add(float64(n))
		}
		if rerr != nil {
			break
		}
	}
	closeConn()
	r.closed("")
}

// pubReader is the data stream's request body: the publisher's bytes.
// When the publisher's side ends, so does the stream.
type pubReader struct {
	conn      net.Conn
	closeConn func()
	ended     func()
	bytes     interface{ Add(float64) }
}

func (p *pubReader) Read(b []byte) (int, error) {
	n, err := p.conn.Read(b)
	if n > 0 {
		p.bytes.Add(float64(n))
	}
	if err != nil {
		p.ended()
		if errors.Is(err, net.ErrClosed) {
			err = io.EOF
		}
	}
	return n, err
}

func (p *pubReader) Close() error {
	p.closeConn()
	return nil
}
