package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIServerWrites reads the API server's apiserver_request_total and sums
// the write requests (APPLY, POST, PUT, PATCH, DELETE, DELETECOLLECTION) on
// the given resources, keyed "VERB resource" or "VERB resource/subresource".
// The counter covers every client; callers compare two readings.
func APIServerWrites(ctx context.Context, cfg *rest.Config, resources []string) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	return ParseAPIServerWrites(strings.NewReader(string(raw)), resources)
}

// APIServerRefusedWrites is APIServerWrites of the writes the API server
// refused (RefusedCodes): a caller that subtracts them from
// APIServerWrites counts what was stored.
func APIServerRefusedWrites(ctx context.Context, cfg *rest.Config, resources []string) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	return ParseAPIServerRefusedWrites(strings.NewReader(string(raw)), resources)
}

// RefusedCodes are the answers with which the API server refuses a write
// for what it is (RBAC or admission: 403; validation, including a
// ValidatingAdmissionPolicy's Invalid: 422): nothing was stored.
var RefusedCodes = map[string]bool{"403": true, "422": true}

// ParseAPIServerWrites is APIServerWrites on a metrics exposition.
func ParseAPIServerWrites(r io.Reader, resources []string) (map[string]float64, error) {
	return parseWrites(r, resources, func(string) bool { return true })
}

// ParseAPIServerRefusedWrites is ParseAPIServerWrites of the writes the API
// server refused (RefusedCodes) only.
func ParseAPIServerRefusedWrites(r io.Reader, resources []string) (map[string]float64, error) {
	return parseWrites(r, resources, func(code string) bool { return RefusedCodes[code] })
}

func parseWrites(r io.Reader, resources []string, code func(string) bool) (map[string]float64, error) {
	keep := map[string]bool{}
	for _, res := range resources {
		keep[res] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const prefix = "apiserver_request_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndex(line, "}")
		lbl := parseLabels(line[len(prefix):end])
		verb, res := lbl["verb"], lbl["resource"]
		if lbl["subresource"] != "" {
			res += "/" + lbl["subresource"]
		}
		switch verb {
		case "APPLY", "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		if !keep[lbl["resource"]] || !code(lbl["code"]) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[verb+" "+res] += v
	}
	return out, sc.Err()
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}
