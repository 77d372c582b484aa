package apply

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// appendJSON appends v as encoding/json's Marshal writes it (map keys
// sorted, HTML characters escaped), without its reflection: the applied-hash
// annotation of every object already applied is a hash of exactly these
// bytes, so they must not change, and hashing is a part of every comparison
// (TestAppendJSONIsMarshal holds them equal). Values outside what the
// converter produces for unstructured content are handed to Marshal.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, t), nil
	case bool:
		return strconv.AppendBool(b, t), nil
	case int64:
		return strconv.AppendInt(b, t, 10), nil
	case float64:
		return appendFloat(b, t)
	case map[string]any:
		if t == nil {
			return append(b, "null"...), nil
		}
		keys := keysPool.Get().(*[]string)
		*keys = (*keys)[:0]
		for k := range t {
			*keys = append(*keys, k)
		}
		slices.Sort(*keys)
		b = append(b, '{')
		var err error
		for i, k := range *keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			if b, err = appendJSON(b, t[k]); err != nil {
				break
			}
		}
		keysPool.Put(keys)
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	case []any:
		if t == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		data, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		return append(b, data...), nil
	}
}

var keysPool = sync.Pool{New: func() any { return new([]string) }}

// appendFloat is Marshal's float64: shortest form, exponent only below
// 1e-6 or from 1e21 on, and "e-07" written "e-7".
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return json.Marshal(f) // Marshal's own error
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendString is Marshal's string: quotes, backslash and control
// characters escaped, <, > and & as \u003c, \u003e, \u0026, invalid UTF-8
// as \ufffd, and U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
