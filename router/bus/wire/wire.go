// Package wire is the event bus's wire contract: the paths, the header, the
// NDJSON control messages of a session and their bounded decoder. The
// router's listener (router/bus) and the in-cluster agents that dial it
// (switchyard broker, switchyard kv-listener) both build on it.
package wire

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Paths and the protocol header.
const (
	// SessionPath is the control channel: one long-lived POST whose request
	// body carries the client's messages and whose response body carries
	// the router's, one JSON object per line.
	SessionPath = "/bus/v1/session"
	// StreamPathPrefix + stream_id is a data stream, opened by the client
	// for each subscribe command; both bodies carry raw bytes.
	StreamPathPrefix = "/bus/v1/streams/"
	// VersionHeader carries the highest protocol version the client speaks
	// on every request.
	VersionHeader = "switchyard-bus-version"
	// ContentType is the control channel's media type.
	ContentType = "application/x-ndjson"
	// Version is the protocol version this package speaks.
	Version = 1
)

// Message types.
const (
	TypeHello        = "hello"         // client → router, first and once
	TypeWelcome      = "welcome"       // router → client, answers hello
	TypeSubscribe    = "subscribe"     // router → client: open a data stream
	TypeUnsubscribe  = "unsubscribe"   // router → client: end a data stream
	TypeStreamClosed = "stream_closed" // client → router: a stream ended or could not open
	TypeDraining     = "draining"      // client → router: place nothing new here
	TypeHeartbeat    = "heartbeat"     // either way
	TypeHeartbeatAck = "heartbeat_ack" // either way, answers heartbeat
	TypeError        = "error"         // router → client, last message before the session ends
)

// Roles a client declares in hello.
const (
	RoleBroker     = "broker"
	RoleKVListener = "kv_listener"
)

// Refusal codes: the "code" of an HTTP error body or of an error message,
// and of stream_closed. A closed set.
const (
	CodeTLSRequired         = "tls_required"
	CodeHandshakeTimeout    = "handshake_timeout"
	CodeHandshakeFailed     = "handshake_failed"
	CodeConnectionLimit     = "connection_limit"
	CodeAuthTimeout         = "auth_timeout"
	CodeUnauthenticated     = "unauthenticated"
	CodeCredentialRevoked   = "credential_revoked"
	CodeForbidden           = "forbidden"
	CodeUnsupportedVersion  = "unsupported_protocol_version"
	CodeHelloTimeout        = "hello_timeout"
	CodeBadMessage          = "bad_message"
	CodeTooManySessions     = "too_many_sessions"
	CodeSessionSuperseded   = "session_superseded"
	CodeIdleTimeout         = "idle_timeout"
	CodeUnknownStream       = "unknown_stream"
	CodeDuplicateStream     = "duplicate_stream"
	CodeNotFound            = "not_found"
	CodeShuttingDown        = "shutting_down"
	CodeTargetNotAdvertised = "target_not_advertised"
	CodeUnreachable         = "unreachable"
	CodeSendQueueFull       = "send_queue_full"
)

// Bounds of the control channel, checked before anything is kept.
const (
	// MaxLineBytes caps one NDJSON line, its newline excluded.
	MaxLineBytes = 64 << 10
	// MaxIDBytes caps client_id, session_id and stream_id.
	MaxIDBytes = 128
	// MaxNameBytes caps a namespace, host, backend or topic.
	MaxNameBytes = 253
	// MaxNamespaces caps dynamo_namespaces in hello.
	MaxNamespaces = 64
	// MaxSources caps announced sources in hello.
	MaxSources = 256
	// MaxVersions caps versions in hello.
	MaxVersions = 16
	// MaxReasonBytes caps a reason string.
	MaxReasonBytes = 1024
)

// Target names the publisher a subscribe asks the client to connect to.
type Target struct {
	Namespace string `json:"namespace,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      uint16 `json:"port,omitempty"`
	Topic     string `json:"topic,omitempty"`
	// Backend names an announced source (kv_listener sessions).
	Backend string `json:"backend,omitempty"`
	// LastEventID resumes an announced SSE source.
	LastEventID *uint64 `json:"last_event_id,omitempty"`
}

// Source is a source a kv_listener announces in hello.
type Source struct {
	Backend string `json:"backend"`
}

// Limits are the effective limits a welcome carries.
type Limits struct {
	MaxStreams            int   `json:"max_streams"`
	MaxSessionBufferBytes int64 `json:"max_session_buffer_bytes"`
	StreamBufferBytes     int   `json:"stream_buffer_bytes"`
	HeartbeatIntervalMS   int64 `json:"heartbeat_interval_ms"`
	IdleTimeoutMS         int64 `json:"idle_timeout_ms"`
}

// Message is one control message. Type says which fields it uses; the
// others are empty.
type Message struct {
	Type string `json:"type"`

	// hello
	Role             string   `json:"role,omitempty"`
	ClientID         string   `json:"client_id,omitempty"`
	Versions         []int    `json:"versions,omitempty"`
	DynamoNamespaces []string `json:"dynamo_namespaces,omitempty"`
	Sources          []Source `json:"sources,omitempty"`

	// welcome
	SessionID string  `json:"session_id,omitempty"`
	Version   int     `json:"version,omitempty"`
	Limits    *Limits `json:"limits,omitempty"`

	// subscribe, unsubscribe, stream_closed
	StreamID string  `json:"stream_id,omitempty"`
	Target   *Target `json:"target,omitempty"`

	// stream_closed, error
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`

	// heartbeat, heartbeat_ack
	Seq uint64 `json:"seq,omitempty"`
}

// Errors of the decoder.
var (
	ErrLineTooLong = errors.New("control message longer than the line cap")
	ErrBadMessage  = errors.New("malformed control message")
)

// Decoder reads control messages, one per line, never holding more than
// MaxLineBytes of a line.
type Decoder struct {
	r    *bufio.Reader
	line []byte
}

// NewDecoder reads from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 4096)}
}

// Decode returns the next message. Empty lines are skipped. A line over
// the cap is ErrLineTooLong, a line that is not a valid message wraps
// ErrBadMessage; both leave the decoder unusable. io.EOF ends a clean
// stream; a stream cut inside a line is io.ErrUnexpectedEOF.
func (d *Decoder) Decode() (Message, error) {
	for {
		d.line = d.line[:0]
		for {
			chunk, err := d.r.ReadSlice('\n')
			if len(d.line)+len(chunk) > MaxLineBytes+1 {
				return Message{}, ErrLineTooLong
			}
			d.line = append(d.line, chunk...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(bytes.TrimSpace(d.line)) == 0 {
					return Message{}, io.EOF
				}
				return Message{}, io.ErrUnexpectedEOF
			}
			return Message{}, err
		}
		line := bytes.TrimSpace(d.line)
		if len(line) == 0 {
			continue
		}
		return Parse(line)
	}
}

// Parse decodes and validates one line (without its newline).
func Parse(line []byte) (Message, error) {
	if len(line) > MaxLineBytes {
		return Message{}, ErrLineTooLong
	}
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, a...))
}

func checkName(field, s string, max int, required bool) error {
	if s == "" {
		if required {
			return bad("%s is required", field)
		}
		return nil
	}
	if len(s) > max {
		return bad("%s longer than %d bytes", field, max)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c == 0x7f {
			return bad("%s holds a control or space character", field)
		}
	}
	return nil
}

// ValidStreamID reports whether s may name a stream: 1–128 bytes of
// [A-Za-z0-9._-], so it fits a path segment unescaped.
func ValidStreamID(s string) bool {
	if s == "" || len(s) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Validate checks the fields the message's type requires and every bound.
func (m *Message) Validate() error {
	if len(m.Reason) > MaxReasonBytes {
		return bad("reason longer than %d bytes", MaxReasonBytes)
	}
	if err := checkName("code", m.Code, 64, false); err != nil {
		return err
	}
	switch m.Type {
	case TypeHello:
		if m.Role != RoleBroker && m.Role != RoleKVListener {
			return bad("role must be broker or kv_listener")
		}
		if err := checkName("client_id", m.ClientID, MaxIDBytes, true); err != nil {
			return err
		}
		if len(m.Versions) == 0 || len(m.Versions) > MaxVersions {
			return bad("versions must list 1 to %d versions", MaxVersions)
		}
		if len(m.DynamoNamespaces) > MaxNamespaces {
			return bad("more than %d dynamo_namespaces", MaxNamespaces)
		}
		for _, ns := range m.DynamoNamespaces {
			if err := checkName("dynamo_namespaces[]", ns, MaxNameBytes, true); err != nil {
				return err
			}
		}
		if len(m.Sources) > MaxSources {
			return bad("more than %d sources", MaxSources)
		}
		for _, s := range m.Sources {
			if err := checkName("sources[].backend", s.Backend, MaxNameBytes, true); err != nil {
				return err
			}
		}
	case TypeWelcome:
		if !strings.HasPrefix(m.SessionID, "sess-") || len(m.SessionID) > MaxIDBytes {
			return bad("session_id must start with sess-")
		}
		if m.Version < 1 {
			return bad("version must be at least 1")
		}
		if m.Limits == nil {
			return bad("limits are required")
		}
	case TypeSubscribe:
		if !ValidStreamID(m.StreamID) {
			return bad("stream_id is not a valid stream id")
		}
		if m.Target == nil {
			return bad("target is required")
		}
		return m.Target.Validate()
	case TypeUnsubscribe, TypeStreamClosed:
		if !ValidStreamID(m.StreamID) {
			return bad("stream_id is not a valid stream id")
		}
	case TypeDraining, TypeHeartbeat, TypeHeartbeatAck:
	case TypeError:
		if m.Code == "" {
			return bad("code is required")
		}
	case "":
		return bad("type is required")
	default:
		return bad("unknown type")
	}
	return nil
}

// Validate checks a subscribe target: a publisher (namespace, host, port)
// or an announced backend.
func (t *Target) Validate() error {
	if t.Backend != "" {
		return checkName("target.backend", t.Backend, MaxNameBytes, true)
	}
	if err := checkName("target.namespace", t.Namespace, MaxNameBytes, true); err != nil {
		return err
	}
	if err := checkName("target.host", t.Host, MaxNameBytes, true); err != nil {
		return err
	}
	if t.Port == 0 {
		return bad("target.port is required")
	}
	if len(t.Topic) > MaxNameBytes {
		return bad("target.topic longer than %d bytes", MaxNameBytes)
	}
	return nil
}

// Append appends m's line, newline included, to b.
func Append(b []byte, m *Message) ([]byte, error) {
	j, err := json.Marshal(m)
	if err != nil {
		return b, err
	}
	b = append(b, j...)
	return append(b, '\n'), nil
}

// ErrorBody is the JSON body of every HTTP refusal of the listener.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// NewErrorBody is the body refusing with code.
func NewErrorBody(code, message string) []byte {
	var e ErrorBody
	e.Error.Code, e.Error.Message = code, message
	b, _ := json.Marshal(&e)
	return b
}

// RendezvousKey encodes a target for placement: namespace, host, port and
// topic, each string as a 2-byte big-endian length and its bytes, the port
// as 2 bytes big-endian:
//
//	u16(len ns) ns ‖ u16(len host) host ‖ u16(port) ‖ u16(len topic) topic
func RendezvousKey(namespace, host string, port uint16, topic string) []byte {
	k := make([]byte, 0, 8+len(namespace)+len(host)+len(topic))
	for _, s := range []string{namespace, host} {
		k = binary.BigEndian.AppendUint16(k, uint16(len(s)))
		k = append(k, s...)
	}
	k = binary.BigEndian.AppendUint16(k, port)
	k = binary.BigEndian.AppendUint16(k, uint16(len(topic)))
	return append(k, topic...)
}

// Rendezvous is the placement weight of clientID for a target: the first 8
// bytes, big-endian, of SHA-256(u32(len(key)) ‖ key ‖ client_id). The
// listener and the simulator both place by it.
func Rendezvous(namespace, host string, port uint16, topic, clientID string) uint64 {
	key := RendezvousKey(namespace, host, port, topic)
	h := sha256.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(key)))
	h.Write(n[:])
	h.Write(key)
	h.Write([]byte(clientID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
