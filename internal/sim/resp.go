package sim

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
)

// errFrame is a RESP frame this reader cannot parse.
var errFrame = errors.New("sim: malformed RESP frame")

// readFrame reads one whole RESP2 or RESP3 frame from r and returns its
// bytes as sent, so the switch can forward it untouched. Requests from
// clients are arrays of bulk strings; replies and pushes may be any type.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	err := appendFrame(r, &buf, 0)
	return buf, err
}

// appendFrame appends one frame (with its nested frames) to buf.
func appendFrame(r *bufio.Reader, buf *[]byte, depth int) error {
	if depth > 64 {
		return fmt.Errorf("%w: nested too deep", errFrame)
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	*buf = append(*buf, line...)
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("%w: %q", errFrame, line)
	}
	head := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		return nil
	case '$', '!', '=':
		return appendBulk(r, buf, head)
	case '*', '~', '>':
		return appendItems(r, buf, head, 1, depth)
	case '%', '|':
		return appendItems(r, buf, head, 2, depth)
	}
	return fmt.Errorf("%w: type %q", errFrame, line[0])
}

func appendBulk(r *bufio.Reader, buf *[]byte, head string) error {
	n, err := strconv.Atoi(head)
	if err != nil {
		return fmt.Errorf("%w: length %q", errFrame, head)
	}
	if n < 0 {
		return nil // a RESP2 nil bulk
	}
	start := len(*buf)
	*buf = append(*buf, make([]byte, n+2)...)
	if _, err := ioReadFull(r, (*buf)[start:]); err != nil {
		return err
	}
	return nil
}

func appendItems(r *bufio.Reader, buf *[]byte, head string, per, depth int) error {
	n, err := strconv.Atoi(head)
	if err != nil {
		return fmt.Errorf("%w: count %q", errFrame, head)
	}
	for i := 0; i < n*per; i++ {
		if err := appendFrame(r, buf, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func ioReadFull(r *bufio.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// encodeCommand writes words as a RESP array of bulk strings.
func encodeCommand(words []string) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(words)), 10)
	b = append(b, "\r\n"...)
	for _, w := range words {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(w)), 10)
		b = append(b, "\r\n"...)
		b = append(b, w...)
		b = append(b, "\r\n"...)
	}
	return b
}
