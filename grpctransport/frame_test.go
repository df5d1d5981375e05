package grpctransport

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

// TestFromWireBounds holds each check of a received message to its
// boundary, on the stream from peer 2 to peer 1 of three: the last value
// accepted and the first refused, each refusal with its reason. A kind
// is an int32 on the wire and a byte in dmutex, so a kind that truncates
// to a valid one must be refused too.
func TestFromWireBounds(t *testing.T) {
	const from, to, n = 2, 1, 3
	wire := func(mod func(w *wirepb.Message)) *wirepb.Message {
		w := &wirepb.Message{Kind: wirepb.Kind_KIND_TOKEN, From: from, To: to, Ts: 4, Ref: 5, Fence: 6}
		if mod != nil {
			mod(w)
		}
		return w
	}
	tokenOf := func(ln, queue int) func(w *wirepb.Message) {
		return func(w *wirepb.Message) {
			w.Token = &wirepb.Token{Ln: make([]uint64, ln), Queue: make([]uint32, queue)}
		}
	}
	refused := []struct {
		name   string
		w      *wirepb.Message
		reason string
	}{
		{"no message", nil, "no message"},
		{"kind 0", wire(func(w *wirepb.Message) { w.Kind = 0 }), "unknown kind 0"},
		{"kind 255", wire(func(w *wirepb.Message) { w.Kind = 255 }), "unknown kind 255"},
		{"kind 256 + request", wire(func(w *wirepb.Message) { w.Kind = 256 + wirepb.Kind(dmutex.KindRequest) }), "unknown kind 257"},
		{"kind -256 + request", wire(func(w *wirepb.Message) { w.Kind = -256 + wirepb.Kind(dmutex.KindRequest) }), "unknown kind -255"},
		{"another sender", wire(func(w *wirepb.Message) { w.From = 0 }), "message from 0 to 1 on the stream from 2 to 1"},
		{"another receiver", wire(func(w *wirepb.Message) { w.To = 0 }), "message from 2 to 0 on the stream from 2 to 1"},
		{"fence past MaxFence", wire(func(w *wirepb.Message) { w.Fence = MaxFence + 1 }), "beyond the bound"},
		{"n+1 counters", wire(tokenOf(n+1, 0)), "token with 4 counters and 0 queued for 3 peers"},
		{"n+1 queued", wire(tokenOf(0, n+1)), "token with 0 counters and 4 queued for 3 peers"},
		{"queues peer n", wire(func(w *wirepb.Message) { w.Token = &wirepb.Token{Queue: []uint32{0, n}} }), "token queues peer 3 of 3"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fromWire(tt.w, from, to, n)
			require.ErrorIs(t, err, errFrame)
			assert.ErrorContains(t, err, tt.reason)
		})
	}

	accepted := []struct {
		name string
		w    *wirepb.Message
		want dmutex.Message
	}{
		{"fence MaxFence, no token", wire(func(w *wirepb.Message) { w.Kind, w.Fence = wirepb.Kind_KIND_REQUEST, MaxFence }),
			dmutex.Message{Kind: dmutex.KindRequest, From: from, To: to, TS: 4, Ref: 5, Fence: MaxFence}},
		{"n counters and n queued, the last peer among them", wire(func(w *wirepb.Message) {
			w.Token = &wirepb.Token{Ln: []uint64{7, 8, 9}, Queue: []uint32{n - 1, 0, 1}}
		}), dmutex.Message{Kind: dmutex.KindToken, From: from, To: to, TS: 4, Ref: 5, Fence: 6,
			Token: &dmutex.Token{LN: []uint64{7, 8, 9}, Queue: []int{n - 1, 0, 1}}}},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			m, err := fromWire(tt.w, from, to, n)
			require.NoError(t, err)
			assert.Equal(t, tt.want, m)
		})
	}
}

// TestCheckHelloBounds checks what peer 1 of three accepts as the first
// frame of a stream: a hello alone, from another member, for peer 1,
// with a first sequence number. The receiver is not peer 0, so that a
// frame without a hello, whose sender reads as 0, is not refused only
// for claiming to be peer 0.
func TestCheckHelloBounds(t *testing.T) {
	const self, n = 1, 3
	frame := func(mod func(f *wirepb.Frame)) *wirepb.Frame {
		f := &wirepb.Frame{Hello: &wirepb.Hello{From: 0, To: self, N: n, Epoch: 9, FirstSeq: 1}}
		if mod != nil {
			mod(f)
		}
		return f
	}
	refused := []struct {
		name   string
		f      *wirepb.Frame
		reason string
	}{
		{"no hello", &wirepb.Frame{Seq: 1, Msg: toWire(msg(0, self, 1))}, "must open with a hello"},
		{"empty frame", &wirepb.Frame{}, "must open with a hello"},
		{"hello and a message", frame(func(f *wirepb.Frame) { f.Msg = toWire(msg(0, self, 1)) }), "must open with a hello"},
		{"hello and a barrier", frame(func(f *wirepb.Frame) { f.Barrier = 1 }), "must open with a hello"},
		{"hello with a sequence number", frame(func(f *wirepb.Frame) { f.Seq = 1 }), "must open with a hello"},
		{"sender n", frame(func(f *wirepb.Frame) { f.Hello.From = n }), "sender id 3 is not another member"},
		{"sender itself", frame(func(f *wirepb.Frame) { f.Hello.From = self }), "sender id 1 is not another member"},
		{"for another peer", frame(func(f *wirepb.Frame) { f.Hello.To = 2 }), "hello for peer 2 reached peer 1"},
		{"first sequence number 0", frame(func(f *wirepb.Frame) { f.Hello.FirstSeq = 0 }), "first sequence number 0"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkHello(tt.f, self, n)
			require.ErrorIs(t, err, errFrame)
			assert.ErrorContains(t, err, tt.reason)
		})
	}
	for _, from := range []uint32{0, n - 1} {
		got, err := checkHello(frame(func(f *wirepb.Frame) { f.Hello.From = from }), self, n)
		require.NoError(t, err, "sender %d", from)
		assert.EqualValues(t, from, got)
	}
}

// TestCheckBodyBounds checks a frame after the hello on the stream from
// peer 2 to peer 1 of three: it carries a sequence number and exactly
// one of a message and a barrier, never a second hello.
func TestCheckBodyBounds(t *testing.T) {
	const from, to, n = 2, 1, 3
	good := toWire(msg(from, to, 1))
	refused := []struct {
		name   string
		f      *wirepb.Frame
		reason string
	}{
		{"second hello with a barrier", &wirepb.Frame{Seq: 2, Hello: &wirepb.Hello{From: from, To: to, N: n, FirstSeq: 2}, Barrier: 1}, "second hello"},
		{"no sequence number, a message", &wirepb.Frame{Msg: good}, "without a sequence number"},
		{"no sequence number, a barrier", &wirepb.Frame{Barrier: 1}, "without a sequence number"},
		{"message and barrier", &wirepb.Frame{Seq: 1, Msg: good, Barrier: 1}, "exactly one of a message and a barrier"},
		{"neither", &wirepb.Frame{Seq: 1}, "exactly one of a message and a barrier"},
		{"a bad message", &wirepb.Frame{Seq: 1, Msg: &wirepb.Message{Kind: 99, From: from, To: to}}, "unknown kind 99"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, isMsg, err := checkBody(tt.f, from, to, n)
			require.ErrorIs(t, err, errFrame)
			assert.ErrorContains(t, err, tt.reason)
			assert.False(t, isMsg)
		})
	}

	m, isMsg, err := checkBody(&wirepb.Frame{Seq: 1, Msg: good}, from, to, n)
	require.NoError(t, err)
	assert.True(t, isMsg)
	assert.Equal(t, msg(from, to, 1), m)

	m, isMsg, err = checkBody(&wirepb.Frame{Seq: 2, Barrier: 3}, from, to, n)
	require.NoError(t, err)
	assert.False(t, isMsg, "a barrier carries no message")
	assert.Zero(t, m)
}

// TestUnmarshalFrameSize checks the frame size limit on the raw bytes,
// which the server codec applies before decoding: maxSize bytes pass,
// one more is refused. decodeFrame, the fuzz test's entry, stops at
// bytes that do not decode.
func TestUnmarshalFrameSize(t *testing.T) {
	f := &wirepb.Frame{Seq: 1, Msg: toWire(msg(2, 1, 1))}
	b, err := proto.Marshal(f)
	require.NoError(t, err)

	var got wirepb.Frame
	require.NoError(t, unmarshalFrame(b, &got, len(b)))
	assert.True(t, proto.Equal(f, &got))
	err = unmarshalFrame(b, new(wirepb.Frame), len(b)-1)
	require.ErrorIs(t, err, errFrame)
	assert.ErrorContains(t, err, "limit")

	for _, hello := range []bool{true, false} {
		_, err := decodeFrame([]byte{0xff, 0xff, 0xff}, hello, 2, 1, 3, 1024)
		require.ErrorIs(t, err, errFrame)
		assert.ErrorContains(t, err, "cannot parse", "hello %v: the decoding error, not a check of an empty frame", hello)
	}
}

// TestFrameCodec checks the server's codec directly: a frame that gRPC
// hands over in several buffers decodes as well as one in a single
// buffer, the size limit holds for both, and a message protobuf cannot
// encode is an error, not an empty frame.
func TestFrameCodec(t *testing.T) {
	c := frameCodec{maxSize: 1024}
	f := &wirepb.Frame{Seq: 3, Msg: toWire(msg(2, 1, 1)), Ack: 2, AckEpoch: 5}
	out, err := c.Marshal(f)
	require.NoError(t, err)
	b := out.Materialize()
	require.Greater(t, len(b), 2)

	for _, data := range []mem.BufferSlice{
		{mem.SliceBuffer(b)},
		{mem.SliceBuffer(b[:2]), mem.SliceBuffer(b[2:])},
	} {
		var got wirepb.Frame
		require.NoError(t, c.Unmarshal(data, &got), "%d buffers", len(data))
		assert.True(t, proto.Equal(f, &got), "%d buffers: %v", len(data), &got)
		err := frameCodec{maxSize: len(b) - 1}.Unmarshal(data, new(wirepb.Frame))
		require.ErrorIs(t, err, errFrame, "%d buffers", len(data))
	}

	_, err = c.Marshal(&wirepb.Frame{Hello: &wirepb.Hello{Algorithm: "\xff"}})
	require.Error(t, err, "a string that is not UTF-8 cannot be encoded")
	_, err = c.Marshal("not a message")
	require.ErrorContains(t, err, "cannot encode string")
	require.ErrorContains(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, new(int)), "cannot decode into *int")
}
