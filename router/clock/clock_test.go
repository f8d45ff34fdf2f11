package clock

import (
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestManualFiresTimersInDeadlineOrder(t *testing.T) {
	m := NewManual(epoch)
	late := m.NewTimer(2 * time.Second)
	early := m.NewTimer(time.Second)
	tie := m.NewTimer(time.Second)
	if m.Pending() != 3 {
		t.Fatalf("pending = %d, want 3", m.Pending())
	}
	m.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	m.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("early fired at %v", got)
	}
	<-tie.C()
	if m.Pending() != 1 {
		t.Fatalf("pending = %d, want 1", m.Pending())
	}
	if !late.Stop() {
		t.Fatal("Stop on a pending timer reported false")
	}
	if late.Stop() {
		t.Fatal("second Stop reported true")
	}
	m.Advance(time.Hour)
	select {
	case <-late.C():
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestVirtualNextDeadlineAndNoBackwards(t *testing.T) {
	v := NewVirtual(epoch)
	if _, ok := v.NextDeadline(); ok {
		t.Fatal("empty clock reported a deadline")
	}
	v.NewTimer(5 * time.Second)
	d, ok := v.NextDeadline()
	if !ok || !d.Equal(epoch.Add(5*time.Second)) {
		t.Fatalf("NextDeadline = %v %v", d, ok)
	}
	v.AdvanceTo(d)
	v.AdvanceTo(epoch) // backwards: ignored
	if !v.Now().Equal(d) {
		t.Fatalf("clock moved backwards to %v", v.Now())
	}
}

func TestSleepReturnsEarlyWhenDone(t *testing.T) {
	m := NewManual(epoch)
	done := make(chan struct{})
	res := make(chan bool)
	go func() { res <- Sleep(m, time.Minute, done) }()
	m.WaitForTimers(1, nil)
	close(done)
	if <-res {
		t.Fatal("Sleep reported a full wait after done closed")
	}
	go func() { res <- Sleep(m, time.Minute, nil) }()
	m.WaitForTimers(1, nil)
	m.Advance(time.Minute)
	if !<-res {
		t.Fatal("Sleep did not complete after the clock advanced")
	}
	if !Sleep(Real{}, 0, nil) {
		t.Fatal("zero sleep should complete")
	}
}

func TestZeroTimerFiresImmediately(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(0)
	if got := <-tm.C(); !got.Equal(epoch) {
		t.Fatalf("fired at %v", got)
	}
}
