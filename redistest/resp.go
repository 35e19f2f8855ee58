package redistest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// maxBulkLen bounds the size of a single bulk reply accepted by the client
// (Redis' own proto-max-bulk-len default).
const maxBulkLen = 512 << 20

// respError is an error reply (-ERR ..., -WRONGTYPE ..., ...) from the server.
type respError string

func (e respError) Error() string { return string(e) }

// link says how to reach a server: its address, TLS (nil: plain TCP) and
// the password to AUTH with first ("": none).
type link struct {
	addr     string
	tls      *tls.Config
	password string
}

// roundTrip dials the server, sends one command and returns its decoded
// reply. The whole exchange, TLS handshake and AUTH included, is bounded by
// timeout. Error replies are returned as reply values (of type respError),
// not as err; err reports I/O and protocol failures only, and a refused
// AUTH.
func roundTrip(l link, timeout time.Duration, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("empty command")
	}
	deadline := time.Now().Add(timeout)
	raw, err := net.DialTimeout("tcp", l.addr, timeout)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	// A dial to a port nobody listens on can, rarely, connect the socket to
	// itself (TCP simultaneous open). Drop such connections at once so the
	// port is released for the server that is about to bind it.
	if raw.LocalAddr().String() == raw.RemoteAddr().String() {
		return nil, fmt.Errorf("dial %s: connected to itself", l.addr)
	}
	if err := raw.SetDeadline(deadline); err != nil {
		return nil, err
	}
	conn := raw
	if l.tls != nil {
		tc := tls.Client(raw, l.tls)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS handshake with %s: %w", l.addr, err)
		}
		conn = tc
	}
	var req []byte
	if l.password != "" {
		req = encodeCommand([]string{"AUTH", l.password})
	}
	if _, err := conn.Write(append(req, encodeCommand(args)...)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if l.password != "" {
		reply, err := readReply(r)
		if err != nil {
			return nil, err
		}
		if reply != "OK" {
			return nil, fmt.Errorf("AUTH replied %#v", reply)
		}
	}
	return readReply(r)
}

// encodeCommand encodes args as a RESP array of bulk strings.
func encodeCommand(args []string) []byte {
	var b bytes.Buffer
	b.WriteByte('*')
	b.WriteString(strconv.Itoa(len(args)))
	b.WriteString("\r\n")
	for _, a := range args {
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(len(a)))
		b.WriteString("\r\n")
		b.WriteString(a)
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// readReply decodes one reply. RESP2 types map to string (simple and bulk
// strings), int64, nil (null bulk / null array), []any and respError. The
// RESP3 types are decoded too, in case a caller switched the connection with
// HELLO 3: null -> nil, boolean -> bool, double and big number -> string,
// verbatim string -> string (without its format prefix), map -> flat []any of
// alternating keys and values, set and push -> []any; attributes are skipped.
func readReply(r *bufio.Reader) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, errors.New("protocol error: empty reply line")
	}
	typ, rest := line[0], line[1:]
	switch typ {
	case '+', ',', '(':
		return rest, nil
	case '-':
		return respError(rest), nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("protocol error: bad integer %q", rest)
		}
		return n, nil
	case '_':
		return nil, nil
	case '#':
		switch rest {
		case "t":
			return true, nil
		case "f":
			return false, nil
		}
		return nil, fmt.Errorf("protocol error: bad boolean %q", rest)
	case '$', '=', '!':
		n, err := parseLen(rest, maxBulkLen)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errors.New("protocol error: bulk string not terminated by CRLF")
		}
		s := string(buf[:n])
		switch typ {
		case '!':
			return respError(s), nil
		case '=':
			if len(s) >= 4 && s[3] == ':' {
				s = s[4:]
			}
		}
		return s, nil
	case '*', '~', '>', '%', '|':
		n, err := parseLen(rest, 1<<32)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		arr := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if typ == '|' {
			// Attributes precede the actual reply; drop them.
			return readReply(r)
		}
		return arr, nil
	}
	return nil, fmt.Errorf("protocol error: unknown reply type %q", typ)
}

// readLine reads one CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("protocol error: line %q not terminated by CRLF", line)
	}
	return line[:len(line)-2], nil
}

// parseLen parses a length header; -1 (null) is allowed.
func parseLen(s string, limit int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > limit {
		return 0, fmt.Errorf("protocol error: bad length %q", s)
	}
	return n, nil
}

// infoField returns the value of field in an INFO / CLUSTER INFO reply.
func infoField(reply any, field string) (string, bool) {
	s, ok := reply.(string)
	if !ok {
		return "", false
	}
	for line := range strings.SplitSeq(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
