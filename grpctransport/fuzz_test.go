package grpctransport

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

var writeCorpus = flag.Bool("write-corpus", false, "rewrite testdata/fuzz/FuzzDecode from seedFrames")

// seedFrames are encoded frames worth starting the fuzzer from: a hello,
// each kind of body, and a few near misses.
func seedFrames(t testing.TB) map[string][]byte {
	enc := func(f *wirepb.Frame) []byte {
		b, err := proto.Marshal(f)
		require.NoError(t, err)
		return b
	}
	return map[string][]byte{
		"hello":             enc(&wirepb.Frame{Hello: &wirepb.Hello{From: 1, To: 0, N: 3, Epoch: 77, FirstSeq: 1}}),
		"request":           enc(&wirepb.Frame{Seq: 1, Msg: toWire(dmutex.Message{Kind: dmutex.KindRequest, From: 1, To: 0, TS: 5})}),
		"reply":             enc(&wirepb.Frame{Seq: 2, Msg: toWire(dmutex.Message{Kind: dmutex.KindReply, From: 1, To: 0, TS: 6, Ref: 5, Fence: 3})}),
		"token":             enc(&wirepb.Frame{Seq: 3, Msg: toWire(dmutex.Message{Kind: dmutex.KindToken, From: 1, To: 0, Token: &dmutex.Token{LN: []uint64{1, 2, 3}, Queue: []int{2, 0}}})}),
		"barrier":           enc(&wirepb.Frame{Seq: 4, Barrier: 1}),
		"stranger in queue": enc(&wirepb.Frame{Seq: 7, Msg: &wirepb.Message{Kind: wirepb.Kind_KIND_TOKEN, From: 1, Token: &wirepb.Token{Queue: []uint32{3}}}}),
		"bad kind":          enc(&wirepb.Frame{Seq: 5, Msg: &wirepb.Message{Kind: 42, From: 1}}),
		"big token":         enc(&wirepb.Frame{Seq: 6, Msg: &wirepb.Message{Kind: wirepb.Kind_KIND_TOKEN, From: 1, Token: &wirepb.Token{Ln: make([]uint64, 9)}}}),
		"hello and body":    enc(&wirepb.Frame{Seq: 1, Hello: &wirepb.Hello{From: 1, N: 3, FirstSeq: 1}, Barrier: 2}),
		"empty":             {},
		"truncated":         {0x1a, 0x10, 0x08},
	}
}

// TestWriteSeedCorpus rewrites the committed seed corpus when run with
// -write-corpus.
func TestWriteSeedCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -write-corpus to rewrite testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	require.NoError(t, os.MkdirAll(dir, 0o755))

	for name, b := range seedFrames(t) {

		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		file := filepath.Join(dir, "seed-"+strings.ReplaceAll(name, " ", "-"))
		require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
	}
}

// FuzzDecode feeds arbitrary bytes to the receiving end of the stream from
// peer 1 to peer 0 of three, as a hello and as a later frame. Decoding
// must never panic, and whatever it accepts must be a message the runtime
// could have sent, which survives re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, b := range seedFrames(f) {
		f.Add(b)
	}
	const from, to, n, maxSize = 1, 0, 3, 4096
	f.Fuzz(func(t *testing.T, b []byte) {
		if fr, err := decodeFrame(b, true, from, to, n, maxSize); err == nil {
			h := fr.GetHello()
			require.NotNil(t, h)
			require.EqualValues(t, from, h.GetFrom())
			require.EqualValues(t, to, h.GetTo())
			require.EqualValues(t, n, h.GetN())
			require.NotZero(t, h.GetFirstSeq())
		}
		fr, err := decodeFrame(b, false, from, to, n, maxSize)
		if err != nil {
			require.ErrorIs(t, err, errFrame)
			return
		}
		require.LessOrEqual(t, len(b), maxSize)
		require.NotZero(t, fr.GetSeq())
		m, isMsg, err := checkBody(fr, from, to, n)
		require.NoError(t, err)
		if !isMsg {
			require.NotZero(t, fr.GetBarrier())
			return
		}
		require.True(t, m.Kind.Valid(), "kind %d", m.Kind)
		require.Equal(t, from, m.From)
		require.Equal(t, to, m.To)
		if m.Token != nil {
			require.LessOrEqual(t, len(m.Token.LN), n)
			require.LessOrEqual(t, len(m.Token.Queue), n)
			for _, q := range m.Token.Queue {
				require.True(t, q >= 0 && q < n, "queued peer %d", q)
			}
		}
		back, err := fromWire(toWire(m), from, to, n)
		require.NoError(t, err)
		require.Equal(t, m, back)
	})
}
