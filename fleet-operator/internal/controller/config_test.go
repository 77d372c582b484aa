package controller

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllowedIngressAnnotationsFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"unset: every key": {nil, []string{"*"}},
		"empty: no key":    {[]string{"--allowed-ingress-annotations="}, []string{}},
		"a list, trimmed":  {[]string{"--allowed-ingress-annotations=cert-manager.io/*, nginx.ingress.kubernetes.io/proxy-body-size"}, []string{"cert-manager.io/*", "nginx.ingress.kubernetes.io/proxy-body-size"}},
		"empty items drop": {[]string{"--allowed-ingress-annotations=,a.io/x,"}, []string{"a.io/x"}},
	} {
		t.Run(name, func(t *testing.T) {
			var c Config
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.BindFlags(fs)
			require.NoError(t, fs.Parse(tc.args))
			assert.Equal(t, tc.want, c.AllowedIngressAnnotations)
		})
	}
}
