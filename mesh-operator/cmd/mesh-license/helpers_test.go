package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

var fixedNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func cli(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut, func() time.Time { return fixedNow })
	return code, out.String(), errOut.String()
}
