//go:build linux

package eventplane

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// poller is the process's one epoll instance for parked sessions and the
// goroutine that waits on it. A parked session is registered level-
// triggered and one-shot for readability, hang-up and errors, so the first
// event (or bytes already queued when it parks) wakes it exactly once.
//
// Ownership: a slot is in parked only between a successful park and its
// wake; whoever removes it under mu (the poller on an event, or a stop)
// starts the one goroutine that resumes the session. epoll_ctl runs only
// inside RawConn.Control, which holds the descriptor open, so a closed and
// reused descriptor number is never touched; a closed descriptor leaves
// the epoll set by itself. Events carry the slot's key, never the number.
//
// The waiting goroutine runs only while some session holds a slot: the
// last release writes to a pipe the epoll set also watches (key 0), and
// the goroutine ends if no slot was taken meanwhile; the next slot starts
// it again. A process that stops its subscriptions keeps no goroutine.
type poller struct {
	epfd  int
	stopR int // read end of the stop pipe, in the epoll set as key 0
	stopW int

	mu      sync.Mutex
	parked  map[uint64]*parkSlot
	next    uint64
	live    int  // slots not yet released
	running bool // the waiting goroutine runs
	failed  bool // epoll_wait failed: nothing parks any more
}

// thePoller creates the poller on first use; nil if epoll is unavailable,
// and then sessions read with a goroutine each, as on other systems.
var thePoller = sync.OnceValue(newPoller)

func newPoller() *poller {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		syscall.Close(fd)
		return nil
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // key 0
	if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, pipe[0], &ev); err != nil {
		syscall.Close(fd)
		syscall.Close(pipe[0])
		syscall.Close(pipe[1])
		return nil
	}
	return &poller{epfd: fd, stopR: pipe[0], stopW: pipe[1], parked: map[uint64]*parkSlot{}}
}

// parkSlot is one session's registration with the poller.
type parkSlot struct {
	p          *poller
	key        uint64
	rc         syscall.RawConn
	registered bool   // added to the epoll set (later parks re-arm it)
	resume     func() // run on a new goroutine when the slot wakes
}

// newParkSlot returns a slot for a TCP connection, or nil when the session
// must read with a goroutine of its own (another kind of stream, or no
// poller).
func newParkSlot(c net.Conn) *parkSlot {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	p := thePoller()
	if p == nil {
		return nil
	}
	return p.slot(tc)
}

// slot registers a slot for tc, starting the waiting goroutine if it is
// not running; nil once the poller failed.
func (p *poller) slot(tc *net.TCPConn) *parkSlot {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		return nil
	}
	p.next++
	p.live++
	if !p.running {
		p.running = true
		go p.loop()
	}
	return &parkSlot{p: p, key: p.next, rc: rc}
}

// release gives the slot back once its session ended (it is not parked);
// the last one lets the waiting goroutine end.
func (s *parkSlot) release() {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live--
	if p.live == 0 && p.running {
		syscall.Write(p.stopW, []byte{0}) // a full pipe already says the same
	}
}

var (
	// errConnClosed: the connection was closed before it could park.
	errConnClosed = errors.New("connection closed before parking")
	errPollerDown = errors.New("the poller stopped")
)

// park registers the slot to run resume once its connection is readable
// (or hung up, or stopped through wake). On success the caller's goroutine
// must return without touching the session again: resume may already be
// running. errConnClosed means the connection closed meanwhile; any other
// error that epoll refused it, and the session should stop parking.
func (s *parkSlot) park(resume func()) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		return errPollerDown
	}
	var ctlErr error
	err := s.rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
			Fd: int32(uint32(s.key)), Pad: int32(uint32(s.key >> 32))}
		op := syscall.EPOLL_CTL_MOD
		if !s.registered {
			op = syscall.EPOLL_CTL_ADD
		}
		ctlErr = syscall.EpollCtl(p.epfd, op, int(fd), &ev)
	})
	if err != nil {
		return errConnClosed
	}
	if ctlErr != nil {
		return ctlErr
	}
	s.registered = true
	s.resume = resume
	p.parked[s.key] = s
	return nil
}

// wake resumes the slot if it is parked: a stop calls it after closing the
// connection, whose end epoll does not report.
func (s *parkSlot) wake() {
	s.p.take(s.key)
}

// take removes a parked slot and resumes it on a goroutine of its own.
func (p *poller) take(key uint64) {
	p.mu.Lock()
	s, ok := p.parked[key]
	delete(p.parked, key)
	p.mu.Unlock()
	if ok {
		go s.resume()
	}
}

func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			// Not expected from a valid epoll descriptor. Parked sessions
			// would never wake: resume them all, to read with a goroutine
			// each from now on.
			p.fail()
			return
		}
		for _, ev := range events[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if key == 0 {
				if p.idle() {
					return
				}
				continue
			}
			p.take(key)
		}
	}
}

// idle drains the stop pipe and reports whether the waiting goroutine
// should end: no slot is live. It decides under mu, so a slot taken
// meanwhile either finds the goroutine running or starts a new one.
func (p *poller) idle() bool {
	var buf [64]byte
	for {
		if n, _ := syscall.Read(p.stopR, buf[:]); n <= 0 {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live > 0 {
		return false
	}
	p.running = false
	return true
}

// fail stops parking and resumes every parked session.
func (p *poller) fail() {
	p.mu.Lock()
	p.failed, p.running = true, false
	slots := p.parked
	p.parked = map[uint64]*parkSlot{}
	p.mu.Unlock()
	for _, s := range slots {
		go s.resume()
	}
}
