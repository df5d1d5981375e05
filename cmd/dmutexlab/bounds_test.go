package main

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCanonicalQuery: the numbers of a state are re-printed, so that a
// value padded with zeros does not come back in every tick's upto.
func TestCanonicalQuery(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	pad := strings.Repeat("0", 2000)
	code, body := get(t, srv, "/api/run?alg=maekawa&n=3&sets="+pad+"0,"+pad+"1/1,2/0,2&seed=0007&n=03&c=r0.a.a")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var v runView
	require.NoError(t, json.Unmarshal(body, &v))
	assert.Equal(t, "alg=maekawa&c=r0.a2&n=3&net=fifo&seed=7&sets=0%2C1%2F1%2C2%2F0%2C2", v.Query)
	assert.Less(t, len(body), 20_000, "the answer repeats the padded value")
	code, body = get(t, srv, "/api/run?alg=raymond&n=3&tree=-0001,+0,00")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &v))
	assert.Contains(t, v.Query, "tree=-1%2C0%2C0")
}

// TestChecksBounded: a check beyond the concurrent ones allowed gets a
// 503 with a JSON error at once, and a check that runs out of its time
// gets one too.
func TestChecksBounded(t *testing.T) {
	full := make(chan struct{}, maxChecks)
	for range maxChecks {
		full <- struct{}{}
	}
	srv := httptest.NewServer(newHandlerSlots(full))
	code, body := get(t, srv, "/api/check?alg=ricart-agrawala&n=2")
	srv.Close()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"error":"2 checks are running already; try again when one is done"}`, string(body))

	old := checkTime
	t.Cleanup(func() { checkTime = old })
	checkTime = time.Nanosecond
	srv = httptest.NewServer(newHandler())
	defer srv.Close()
	code, body = get(t, srv, "/api/check?alg=ricart-agrawala&n=3")
	assert.Equal(t, http.StatusServiceUnavailable, code, "%s", body)
	assert.Contains(t, string(body), `"error":"the check ran out of its 1ns`)
}

// TestCheckMemoryBounded runs the configuration that once ran 505 s and
// took 5.7 GB: the checker stops at its memory bound, within seconds.
func TestCheckMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of checking")
	}
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	code, body := get(t, srv, "/api/check?alg=ricart-agrawala&n=8&detector=imperfect&false=9&recovery=1&net=reorder")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var v struct {
		Result struct {
			Stopped  string `json:"stopped"`
			Complete bool   `json:"complete"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(body, &v))
	assert.Equal(t, "memory limit", v.Result.Stopped)
	assert.False(t, v.Result.Complete)
}

// TestOnlyTheLabsOwnPage: an API request that a browser marks as coming
// from another site, or that names another host, is refused with a 403;
// the page's own requests, and clients that say nothing, are served.
func TestOnlyTheLabsOwnPage(t *testing.T) {
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	own := srv.URL // http://127.0.0.1:port
	tests := []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no header", nil, http.StatusOK},
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": own, "Referer": own + "/?n=3"}, http.StatusOK},
		{"typed in the address bar", map[string]string{"Sec-Fetch-Site": "none"}, http.StatusOK},
		{"another site", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a sibling site", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"another origin", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"another referer", map[string]string{"Referer": "http://evil.example/page"}, http.StatusForbidden},
		{"a rebound name", map[string]string{"Host": "evil.example"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/check?alg=ricart-agrawala&n=2", nil)
			require.NoError(t, err)
			for k, v := range tt.header {
				if k == "Host" {
					req.Host = v
					continue
				}
				req.Header.Set(k, v)
			}
			res, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			assert.Equal(t, tt.want, res.StatusCode)
			var body map[string]any
			require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
			if tt.want == http.StatusForbidden {
				assert.Contains(t, body["error"], "the lab answers only")
			}
		})
	}
}

// TestAnswersBounded: an answer that does not encode (a NaN) or that is
// longer than maxAnswer is a JSON error, never an empty or a huge body.
func TestAnswersBounded(t *testing.T) {
	tests := []struct {
		name string
		v    any
		code int
		want string
	}{
		{"NaN", map[string]float64{"loss": math.NaN()}, http.StatusInternalServerError, "does not encode"},
		{"too long", map[string]string{"x": strings.Repeat("a", maxAnswer)}, http.StatusBadRequest, "more than 8388608"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeJSON(rec, http.StatusOK, tt.v)
			assert.Equal(t, tt.code, rec.Code)
			assert.Less(t, rec.Body.Len(), 1000)
			var body map[string]string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Contains(t, body["error"], tt.want)
		})
	}
}

// TestServerTimeouts: the server closes slow and idle connections.
func TestServerTimeouts(t *testing.T) {
	srv := newServer()
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Greater(t, srv.WriteTimeout, checkTime, "a check's answer must have time to go out")
	assert.Positive(t, srv.IdleTimeout)
}
