package dmutex

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// errNoTrace is returned by the writers of a Simulation built with SimConfig.NoTrace.
var errNoTrace = errors.New("dmutex: simulation has no trace (built with SimConfig.NoTrace)")

// WriteLog writes the events so far as a plain log, one line per event in
// the form of TraceEvent.String: the step, the peer, what it did and, for
// messages, the serial number, kind, ends and timestamps. Two runs with
// the same configuration, seed and calls write the same bytes.
func (s *Simulation) WriteLog(w io.Writer) error { return s.w.WriteLog(w) }

// WriteLog writes the events so far as Simulation.WriteLog does.
func (wd *World) WriteLog(w io.Writer) error {
	if !wd.trace {
		return errNoTrace
	}
	bw := bufio.NewWriter(w)
	for _, e := range wd.events {
		bw.WriteString(e.String())
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// WriteMermaid writes the events so far as a Mermaid sequence diagram,
// which GitHub and most Markdown viewers render: one participant per peer,
// one arrow per message, drawn when it is delivered and labelled with its
// kind and timestamps, and a note for each request, entry and exit. A
// lost message is a crossed arrow (P0-xP1) drawn when it is lost, and
// crashes, partitions and heals are notes. Messages still in flight have
// no arrow yet.
func (s *Simulation) WriteMermaid(w io.Writer) error { return s.w.WriteMermaid(w) }

// WriteMermaid writes the events so far as Simulation.WriteMermaid does.
func (wd *World) WriteMermaid(w io.Writer) error {
	if !wd.trace {
		return errNoTrace
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("sequenceDiagram\n")
	for i := range wd.n {
		fmt.Fprintf(bw, "    participant P%d\n", i)
	}
	for _, e := range wd.events {
		switch e.Kind {
		case EventRequest:
			fmt.Fprintf(bw, "    Note over P%d: wants in\n", e.Peer)
		case EventReceive:
			fmt.Fprintf(bw, "    P%d->>P%d: %s\n", e.Msg.From, e.Msg.To, formatMessage(e.Msg, false))
		case EventTry:
			fmt.Fprintf(bw, "    Note over P%d: tries\n", e.Peer)
		case EventRefused:
			fmt.Fprintf(bw, "    Note over P%d: refused\n", e.Peer)
		case EventEnter:
			fmt.Fprintf(bw, "    Note over P%d: enters\n", e.Peer)
		case EventLeave:
			fmt.Fprintf(bw, "    Note over P%d: leaves\n", e.Peer)
		case EventLost:
			fmt.Fprintf(bw, "    P%d-xP%d: %s\n", e.Msg.From, e.Msg.To, formatMessage(e.Msg, false))
		case EventCrash:
			fmt.Fprintf(bw, "    Note over P%d: crashes\n", e.Peer)
		case EventPartition:
			fmt.Fprintf(bw, "    Note over %s: partition %v\n", wd.everyone(), e.Groups)
		case EventHeal:
			fmt.Fprintf(bw, "    Note over %s: heal\n", wd.everyone())
		}
	}
	return bw.Flush()
}

// everyone is the Mermaid span of a note over every participant.
func (wd *World) everyone() string {
	if wd.n == 1 {
		return "P0"
	}
	return fmt.Sprintf("P0,P%d", wd.n-1)
}
