package pypeer

import (
	"strings"
	"testing"
	"time"
)

// chatty writes to stderr until its stdin closes, so the test reads the
// peer's stderr while it is being written (under -race, an unguarded buffer
// is reported here).
const chatty = `
import sys, threading
print("started", flush=True)
stop = threading.Event()
def spam():
    n = 0
    while not stop.is_set():
        n += 1
        sys.stderr.write("line %d\n" % n)
        sys.stderr.flush()
        stop.wait(0.001)
t = threading.Thread(target=spam)
t.start()
sys.stdin.read()
stop.set()
t.join()
`

func TestStderrIsReadableWhileThePeerWrites(t *testing.T) {
	p := Start(t, "-c", chatty)
	p.Expect(t, "started")
	deadline := time.Now().Add(lineWait)
	for !strings.Contains(p.Stderr(), "line 200\n") {
		if time.Now().After(deadline) {
			t.Fatalf("stderr so far: %q", p.Stderr())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSendReachesThePeer(t *testing.T) {
	p := Start(t, "-c", `import sys; print("echo " + sys.stdin.readline().strip(), flush=True)`)
	p.Send(t, "hello")
	if got := p.Expect(t, "echo "); got != "hello" {
		t.Fatalf("peer echoed %q", got)
	}
}
