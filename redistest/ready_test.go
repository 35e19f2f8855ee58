package redistest

import (
	"bufio"
	"net"
	"sync"
	"testing"
	"time"
)

// TestWaitReadyWaitsWhileLoading checks that waitReady keeps polling while
// the server answers PING with -LOADING (as redis-server does while it
// loads its data) and returns once it answers PONG.
func TestWaitReadyWaitsWhileLoading(t *testing.T) {
	const loadingReplies = 3
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	pings := make(chan struct{}, 100)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := readReply(bufio.NewReader(conn)); err == nil {
				pings <- struct{}{}
				reply := "-LOADING Redis is loading the dataset in memory\r\n"
				if n >= loadingReplies {
					reply = "+PONG\r\n"
				}
				conn.Write([]byte(reply))
			}
			conn.Close()
		}
	}()
	p := &process{done: make(chan struct{})} // a process that never exits
	if err := waitReady(link{addr: l.Addr().String()}, p, 10*time.Second); err != nil {
		t.Fatalf("waitReady: %v", err)
	}
	if n := len(pings); n != loadingReplies+1 {
		t.Fatalf("waitReady returned after %d PINGs, want %d (%d answered -LOADING)", n, loadingReplies+1, loadingReplies)
	}
}
