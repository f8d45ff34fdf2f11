package httpd

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// statusLines holds "HTTP/1.1 200 OK\r\n" and the like for each code, so
// the usual status lines are not formatted per answer.
var statusLines [2][1000]string

func init() {
	for code := 100; code < 1000; code++ {
		text := http.StatusText(code)
		if text == "" {
			text = "status code " + strconv.Itoa(code)
		}
		statusLines[0][code] = "HTTP/1.0 " + strconv.Itoa(code) + " " + text + "\r\n"
		statusLines[1][code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
	}
}

// statusLineFor is the status line answering an HTTP/1.minor request.
func statusLineFor(code, minor int) string { return statusLines[minor&1][code] }

// statusLine is an HTTP/1.1 status line.
func statusLine(code int) string { return statusLines[1][code] }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// dated is the Date header's value for one second.
type dated struct {
	sec   int64
	value string
}

var lastDate atomic.Pointer[dated]

// httpDate formats now for the Date header, once per second.
func httpDate(now time.Time) string {
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return d.value
	}
	d := &dated{sec: sec, value: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.value
}
