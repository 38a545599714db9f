// conn-client opens many idle client connections for bench/connections.
//
//	conn-client -target 127.0.0.1:8080 -n 10000 -mode h1 -sources 4
//
// Each connection sends one request (or, for ws, a WebSocket upgrade) and
// reads its answer, then stays open and idle. Once all are open it prints
// "open N failed M" on stdout and holds them until stdin closes. Source
// addresses 127.0.0.1 … 127.0.0.S spread the connections over several
// ephemeral port ranges. With -mode backend-ws it instead serves WebSocket
// upgrades (101, then discards what it reads) and plain requests on -target.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("target", "127.0.0.1:8080", "address to connect to (or serve on, backend-ws)")
	n := flag.Int("n", 1000, "connections")
	mode := flag.String("mode", "h1", "h1, tls, h2c, h2, ws, wss, backend-ws")
	sources := flag.Int("sources", 1, "source addresses 127.0.0.1 .. 127.0.0.N")
	par := flag.Int("parallel", 128, "connections opened at once")
	churn := flag.Duration("churn", 0, "instead: open, serve one request and close connections for this long; print the rate")
	flag.Parse()
	if *churn > 0 {
		churnFor(*target, *mode, *sources, *par, *churn)
		return
	}
	if *mode == "backend-ws" {
		backend(*target)
		return
	}
	conns := make([]net.Conn, *n)
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < *par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= *n {
					return
				}
				src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%*sources))}
				c, err := open(*target, src, *mode)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	open := *n - int(failed.Load())
	fmt.Printf("open %d failed %d\n", open, failed.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(os.Stderr, "conn-client: first error: %v\n", e)
	}
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// churnFor opens connections (one request each, then closed) from par
// goroutines for d and prints "rate R" in connections per second.
func churnFor(target, mode string, sources, par int, d time.Duration) {
	var done, failed atomic.Int64
	var firstErr atomic.Value
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; time.Now().Before(end); i += par {
				src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%sources))}
				c, err := open(target, src, mode)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				// Close with a reset, so that no TIME_WAIT state piles up on the client's ports.
				if t, ok := c.(*net.TCPConn); ok {
					t.SetLinger(0)
				} else if t, ok := c.(*tls.Conn); ok {
					if tc, ok := t.NetConn().(*net.TCPConn); ok {
						tc.SetLinger(0)
					}
				}
				c.Close()
				done.Add(1)
			}
		}(w)
	}
	wg.Wait()
	fmt.Printf("rate %.1f failed %d\n", float64(done.Load())/d.Seconds(), failed.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(os.Stderr, "conn-client: first error: %v\n", e)
	}
}

func open(target string, src *net.TCPAddr, mode string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	raw, err := d.Dial("tcp", target)
	if err != nil {
		return nil, err
	}
	c := raw
	switch mode {
	case "tls", "h2", "wss":
		proto := "http/1.1"
		if mode == "h2" {
			proto = "h2"
		}
		t := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}, ServerName: "localhost"})
		if err := t.Handshake(); err != nil {
			raw.Close()
			return nil, err
		}
		c = t
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	switch mode {
	case "h1", "tls":
		err = h1(c, "GET / HTTP/1.1\r\nhost: localhost\r\n\r\n", 200)
	case "ws", "wss":
		err = h1(c, "GET /ws HTTP/1.1\r\nhost: localhost\r\nconnection: upgrade\r\nupgrade: websocket\r\n"+
			"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", 101)
	case "h2c", "h2":
		err = h2(c)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// h1 sends req and reads one response with the status want (its body too).
func h1(c net.Conn, req string, want int) error {
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 1024)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if want != 101 {
		io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	return nil
}

// h2 sends the preface, SETTINGS and one GET on stream 1, acknowledges the
// server's SETTINGS and reads until stream 1 ends.
func h2(c net.Conn) error {
	var out []byte
	out = append(out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...)
	out = frame(out, 4, 0, 0, nil)
	// :method GET, :scheme http, :path /, :authority localhost (literal, indexed name 1).
	block := []byte{0x82, 0x86, 0x84, 0x41, 9}
	block = append(block, "localhost"...)
	out = frame(out, 1, 0x5, 1, block) // END_STREAM | END_HEADERS
	if _, err := c.Write(out); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 1024)
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		if _, err := io.CopyN(io.Discard, r, int64(length)); err != nil {
			return err
		}
		switch {
		case typ == 4 && flags&1 == 0:
			if _, err := c.Write(frame(nil, 4, 1, 0, nil)); err != nil {
				return err
			}
		case typ == 7:
			return fmt.Errorf("GOAWAY")
		case stream == 1 && (typ == 0 || typ == 1) && flags&1 == 1:
			return nil
		case stream == 1 && typ == 3:
			return fmt.Errorf("RST_STREAM")
		}
	}
}

func frame(out []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	out = append(out, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	out = binary.BigEndian.AppendUint32(out, stream)
	return append(out, payload...)
}

// backend answers "GET /ws" with Upgrade by 101 and then reads and drops
// bytes; anything else gets an empty 200.
func backend(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go serve(c)
	}
}

func serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n"+
				"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
			io.Copy(io.Discard, r)
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
	}
}
