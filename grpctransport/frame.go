package grpctransport

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/grpctransport/internal/wirepb"
)

// DefaultMaxFrameSize is the largest encoded frame a transport accepts
// unless WithMaxFrameSize says otherwise. A Suzuki-Kasami token for the
// largest cluster (dmutex.MaxPeers) takes about 60 KiB.
const DefaultMaxFrameSize = 256 << 10

// MaxFence is the largest fencing token a frame may carry: the library's
// own bound, [dmutex.MaxFence], past which no peer counts. A receiver
// refuses a frame above it and closes its stream, and Send refuses such a
// message, so a forged or corrupt value is stopped at the wire rather than
// passed on to a peer that would refuse it anyway. How far one message may
// move a fence beyond the receiver's own ([dmutex.FenceWindow]) is the
// peer's rule, not the wire's.
const MaxFence = dmutex.MaxFence

// errFrame is wrapped by every error about a frame a receiver refuses.
var errFrame = errors.New("dmutex: bad frame")

// toWire encodes m for the wire.
func toWire(m dmutex.Message) *wirepb.Message {
	w := new(wirepb.Message)
	fillWire(w, m)
	return w
}

// A msgFrame is a frame and its message in one allocation.
type msgFrame struct {
	f wirepb.Frame
	m wirepb.Message
}

// newMsgFrame returns a frame that carries m.
func newMsgFrame(m dmutex.Message) *wirepb.Frame {
	mf := new(msgFrame)
	fillWire(&mf.m, m)
	mf.f.Msg = &mf.m
	return &mf.f
}

// fillWire sets w, a zero wirepb.Message, to m.
func fillWire(w *wirepb.Message, m dmutex.Message) {
	w.Kind, w.From, w.To, w.Ts, w.Ref, w.Fence = wirepb.Kind(m.Kind), uint32(m.From), uint32(m.To), m.TS, m.Ref, m.Fence
	if m.Token != nil {
		w.Token = &wirepb.Token{Ln: append([]uint64(nil), m.Token.LN...)}
		w.Token.Queue = make([]uint32, len(m.Token.Queue))
		for i, q := range m.Token.Queue {
			w.Token.Queue[i] = uint32(q)
		}
	}
}

// fromWire decodes and checks a message that peer from sent to peer to, in
// a cluster of n. It rejects anything the runtime could not have sent: an
// unknown kind, ids that do not match the stream, a token larger than the
// cluster.
func fromWire(w *wirepb.Message, from, to, n int) (dmutex.Message, error) {
	if w == nil {
		return dmutex.Message{}, fmt.Errorf("%w: no message", errFrame)
	}
	k := dmutex.MessageKind(w.GetKind())
	if w.GetKind() < 0 || w.GetKind() > 255 || !k.Valid() {
		return dmutex.Message{}, fmt.Errorf("%w: unknown kind %d", errFrame, w.GetKind())
	}
	if int64(w.GetFrom()) != int64(from) || int64(w.GetTo()) != int64(to) {
		return dmutex.Message{}, fmt.Errorf("%w: message from %d to %d on the stream from %d to %d",
			errFrame, w.GetFrom(), w.GetTo(), from, to)
	}
	if w.GetFence() > MaxFence {
		return dmutex.Message{}, fmt.Errorf("%w: fence %d beyond the bound %d", errFrame, w.GetFence(), uint64(MaxFence))
	}
	m := dmutex.Message{Kind: k, From: from, To: to, TS: w.GetTs(), Ref: w.GetRef(), Fence: w.GetFence()}
	if tok := w.GetToken(); tok != nil {
		if len(tok.GetLn()) > n || len(tok.GetQueue()) > n {
			return dmutex.Message{}, fmt.Errorf("%w: token with %d counters and %d queued for %d peers",
				errFrame, len(tok.GetLn()), len(tok.GetQueue()), n)
		}
		m.Token = &dmutex.Token{LN: append([]uint64(nil), tok.GetLn()...), Queue: make([]int, len(tok.GetQueue()))}
		for i, q := range tok.GetQueue() {
			if q >= uint32(n) {
				return dmutex.Message{}, fmt.Errorf("%w: token queues peer %d of %d", errFrame, q, n)
			}
			m.Token.Queue[i] = int(q)
		}
	}
	return m, nil
}

// checkHello checks the first frame of a stream that peer self, of n,
// received, and returns the sender's claimed id.
func checkHello(f *wirepb.Frame, self, n int) (int, error) {
	h := f.GetHello()
	if h == nil || f.GetMsg() != nil || f.GetBarrier() != 0 || f.GetSeq() != 0 {
		return 0, fmt.Errorf("%w: a stream must open with a hello and nothing else", errFrame)
	}
	if h.GetFrom() >= uint32(n) || int(h.GetFrom()) == self {
		return 0, fmt.Errorf("%w: sender id %d is not another member of [0, %d)", errFrame, h.GetFrom(), n)
	}
	if int64(h.GetTo()) != int64(self) {
		return 0, fmt.Errorf("%w: hello for peer %d reached peer %d", errFrame, h.GetTo(), self)
	}
	if h.GetFirstSeq() == 0 {
		return 0, fmt.Errorf("%w: hello with first sequence number 0", errFrame)
	}
	return int(h.GetFrom()), nil
}

// checkBody checks a frame after the hello of the stream from peer from to
// peer to, and returns its message, if it carries one.
func checkBody(f *wirepb.Frame, from, to, n int) (m dmutex.Message, isMsg bool, err error) {
	if f.GetHello() != nil {
		return m, false, fmt.Errorf("%w: second hello on a stream", errFrame)
	}
	if f.GetSeq() == 0 {
		return m, false, fmt.Errorf("%w: frame without a sequence number", errFrame)
	}
	switch {
	case f.GetMsg() != nil && f.GetBarrier() == 0:
		m, err = fromWire(f.GetMsg(), from, to, n)
		return m, err == nil, err
	case f.GetMsg() == nil && f.GetBarrier() != 0:
		return m, false, nil
	}
	return m, false, fmt.Errorf("%w: a frame carries exactly one of a message and a barrier", errFrame)
}

// decodeFrame decodes one frame from its bytes, as the receiving end of the
// stream from peer from to peer to, in a cluster of n, sees it: the size
// limit, the protobuf decoding and the checks of a hello (when hello is
// set) or of a later frame. The transport's server codec calls
// unmarshalFrame and its stream handler the same checkHello and checkBody;
// decodeFrame gathers the steps so that the fuzz test can drive them from
// raw bytes.
func decodeFrame(b []byte, hello bool, from, to, n, maxSize int) (*wirepb.Frame, error) {
	f := new(wirepb.Frame)
	if err := unmarshalFrame(b, f, maxSize); err != nil {
		return nil, err
	}
	if hello {
		_, err := checkHello(f, to, n)
		return f, err
	}
	_, _, err := checkBody(f, from, to, n)
	return f, err
}

// unmarshalFrame decodes b into f, refusing more than maxSize bytes.
func unmarshalFrame(b []byte, f *wirepb.Frame, maxSize int) error {
	if len(b) > maxSize {
		return fmt.Errorf("%w: %d bytes, limit %d", errFrame, len(b), maxSize)
	}
	if err := proto.Unmarshal(b, f); err != nil {
		return fmt.Errorf("%w: %v", errFrame, err)
	}
	return nil
}

// frameCodec is the server's codec: protobuf, with the frame size limit
// applied to the raw bytes before decoding, so that an oversized frame
// fails the handler's Recv with a reason the transport logs. It speaks
// gRPC's buffer-slice interface (encoding.CodecV2), so that a frame that
// arrives in one piece is decoded in place, without a copy.
type frameCodec struct{ maxSize int }

func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("dmutex: cannot encode %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("dmutex: cannot decode into %T", v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	// proto.Unmarshal copies what it keeps, so b may be reused after.
	if f, ok := v.(*wirepb.Frame); ok {
		return unmarshalFrame(b, f, c.maxSize)
	}
	return proto.Unmarshal(b, m)
}

// Name is gRPC's name for protobuf, so peers need no special content type.
func (frameCodec) Name() string { return "proto" }
