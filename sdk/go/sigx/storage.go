package sigx

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	pb "example.invalid/sigx/sdk/go/sigxpb"
)

// Storage is an actor's durable key/value state as one turn sees it (DESIGN.md §11); get it with
// StorageFromContext(ctx) inside a handler.
//
// Reads go to the sidecar (and its state store) under the turn's activation and epoch. Put and
// Delete are pending until the handler returns: they travel with its result and the sidecar
// commits them as one atomic batch before the caller sees the answer. Reads see the turn's own
// pending writes. A handler that returns an error writes nothing. A refused batch answers the
// caller KindStaleEpoch (a newer activation of the actor exists) or KindInvalid naming the limit
// (keys 1..=1024 bytes, values up to 1 MiB, up to 1000 writes and 4 MiB per turn), and the
// activation is dropped. Safe for concurrent use by the turn's goroutines.
type Storage struct {
	api          pb.ActorHostClient
	actor        *pb.ActorRef
	activationID string
	epoch        uint64

	mu     sync.Mutex
	order  []*pb.StateWrite
	latest map[string]*pb.StateWrite
}

type storageKey struct{}

// StorageFromContext returns the durable state of the actor whose turn ctx belongs to, or nil outside a
// turn. Workers get a Storage whose every read fails and whose writes fail the turn: they have
// no durable state.
func StorageFromContext(ctx context.Context) *Storage {
	s, _ := ctx.Value(storageKey{}).(*Storage)
	return s
}

func newState(api pb.ActorHostClient, t *pb.Turn) *Storage {
	return &Storage{api: api, actor: t.GetActor(), activationID: t.GetActivationId(), epoch: t.GetEpoch()}
}

// Epoch is the activation's fencing token (see TurnInfo.Epoch).
func (s *Storage) Epoch() uint64 { return s.epoch }

func (s *Storage) noState() error {
	if s.epoch == 0 {
		return invalid("%s has no durable state: workers (and sidecars older than state) give turns no epoch; keep state in an actor type",
			s.actor.GetActorType())
	}
	return nil
}

func (s *Storage) read(ctx context.Context, keys []string, all bool) ([]*pb.StateEntry, error) {
	if err := s.noState(); err != nil {
		return nil, err
	}
	if s.api == nil {
		return nil, invalid("this turn has no sidecar client to read state through")
	}
	res, err := s.api.ReadState(ctx, &pb.ReadStateRequest{Actor: s.actor, ActivationId: s.activationID,
		Epoch: s.epoch, Keys: keys, All: all})
	if err != nil {
		return nil, decodeErr(ctx, "", err)
	}
	return res.GetEntries(), nil
}

// Get returns the raw value of key and whether it exists: this turn's pending write if there is
// one, else the store's.
func (s *Storage) Get(ctx context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	w, mine := s.latest[key]
	s.mu.Unlock()
	if mine {
		if w.GetDelete() {
			return nil, false, nil
		}
		return append([]byte(nil), w.GetPut()...), true, nil
	}
	entries, err := s.read(ctx, []string{key}, false)
	if err != nil {
		return nil, false, err
	}
	if len(entries) == 0 || !entries[0].GetFound() {
		return nil, false, nil
	}
	return entries[0].GetValue(), true, nil
}

// GetJSON decodes the value of key into v and reports whether it exists (v is untouched when
// it does not).
func (s *Storage) GetJSON(ctx context.Context, key string, v any) (bool, error) {
	raw, found, err := s.Get(ctx, key)
	if err != nil || !found {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, Errorf("state key %q of %s/%s does not hold the JSON this code expects: %v",
			key, s.actor.GetActorType(), s.actor.GetKey(), err)
	}
	return true, nil
}

// Entry is one stored key and its raw value.
type Entry struct {
	Key   string
	Value []byte
}

// List returns every entry of the actor in key order, with this turn's pending writes applied.
func (s *Storage) List(ctx context.Context) ([]Entry, error) {
	entries, err := s.read(ctx, nil, true)
	if err != nil {
		return nil, err
	}
	all := map[string][]byte{}
	for _, e := range entries {
		if e.GetFound() {
			all[e.GetKey()] = e.GetValue()
		}
	}
	s.mu.Lock()
	for k, w := range s.latest {
		if w.GetDelete() {
			delete(all, k)
		} else {
			all[k] = append([]byte(nil), w.GetPut()...)
		}
	}
	s.mu.Unlock()
	out := make([]Entry, 0, len(all))
	for k, v := range all {
		out = append(out, Entry{Key: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *Storage) push(w *pb.StateWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest == nil {
		s.latest = map[string]*pb.StateWrite{}
	}
	s.latest[w.GetKey()] = w
	s.order = append(s.order, w)
}

// Put sets key to value when the turn succeeds (value is copied).
func (s *Storage) Put(key string, value []byte) {
	v := append([]byte{}, value...)
	s.push(&pb.StateWrite{Key: key, Op: &pb.StateWrite_Put{Put: v}})
}

// PutJSON sets key to v encoded as JSON when the turn succeeds.
func (s *Storage) PutJSON(key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return invalid("state value for key %q has no JSON form: %v", key, err)
	}
	s.Put(key, raw)
	return nil
}

// Delete removes key when the turn succeeds (absent is fine).
func (s *Storage) Delete(key string) {
	s.push(&pb.StateWrite{Key: key, Op: &pb.StateWrite_Delete{Delete: true}})
}

// writes is the batch sent with an ok result; an error when the turn may not write.
func (s *Storage) writes() ([]*pb.StateWrite, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) == 0 {
		return nil, nil
	}
	if err := s.noState(); err != nil {
		return nil, fmt.Errorf("the turn wrote %d state entries: %w", len(s.order), err)
	}
	return append([]*pb.StateWrite(nil), s.order...), nil
}
