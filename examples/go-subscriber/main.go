// A subscriber of hostaffinity's events in Go: nats.go, the published JSON Schemas
// (proto/schemas) and an append-only file of handled events. Run
// `hostaffinity bus subscriber add NAME --events ...` first: it prints the seed file; the
// durable consumer NAME is made for you.
//
// At-least-once in, exactly-once out: each event's effect (here, a line in the handled file,
// synced to disk) carries its id, and the event is acked only after that line is on disk. On
// start the file's ids are read back (a torn last line, cut by a kill, is dropped), so what was
// written but not acked comes again and is skipped by id.
//
//	go build (see scripts/build-go-subscriber.sh)
//	go-subscriber -nats nats://127.0.0.1:4222 -name cmdb \
//	    -seed .cache/dev/nats/subscribers/cmdb.nk -schemas proto/schemas -store cmdb.jsonl
//
// Schema checks here are what a subscriber relies on: the event's type is known, its required
// fields are present and each field it has is of the schema's JSON type. Unknown fields and
// unknown event types are ignored (a newer release may add them).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

const (
	stream    = "HOSTAFFINITY_EVENTS"
	batchSize = 100
)

// eventSchema is the part of a published schema this subscriber checks.
type eventSchema struct {
	required   []string
	properties map[string]string // field -> JSON type ("" when the schema gives none)
}

func loadSchemas(folder string) (map[string]eventSchema, error) {
	paths, err := filepath.Glob(filepath.Join(folder, "*.json"))
	if err != nil {
		return nil, err
	}
	schemas := map[string]eventSchema{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var document struct {
			Defs map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(raw, &document); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		definition := document.Defs[strings.TrimSuffix(filepath.Base(path), ".json")]
		var tag struct {
			Enum []string `json:"enum"`
		}
		if json.Unmarshal(definition.Properties["type"], &tag) != nil || len(tag.Enum) != 1 {
			continue // not an event
		}
		schema := eventSchema{required: definition.Required, properties: map[string]string{}}
		for field, property := range definition.Properties {
			var typed struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(property, &typed) // a union ("anyOf") has no single type
			schema.properties[field] = typed.Type
		}
		schemas[tag.Enum[0]] = schema
	}
	return schemas, nil
}

func jsonType(value interface{}) string {
	switch v := value.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case []interface{}:
		return "array"
	case map[string]interface{}:
		return "object"
	case json.Number:
		if strings.ContainsAny(v.String(), ".eE") {
			return "number"
		}
		return "integer"
	}
	return "?"
}

func (schema eventSchema) check(event map[string]interface{}) error {
	for _, field := range schema.required {
		if _, ok := event[field]; !ok {
			return fmt.Errorf("required field %q missing", field)
		}
	}
	for field, value := range event {
		want := schema.properties[field]
		got := jsonType(value)
		if want != "" && want != got && !(want == "number" && got == "integer") {
			return fmt.Errorf("field %q is %s, the schema says %s", field, got, want)
		}
	}
	return nil
}

// handledLog is the subscriber's store: one JSON line per handled event, synced before the ack.
type handledLog struct {
	file *os.File
	seen map[string]bool
}

func openHandled(path string) (*handledLog, error) {
	raw, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	seen := map[string]bool{}
	kept := 0 // bytes of whole lines
	for _, line := range bytes.SplitAfter(raw, []byte("\n")) {
		var record struct {
			ID string `json:"id"`
		}
		if !bytes.HasSuffix(line, []byte("\n")) || json.Unmarshal(line, &record) != nil {
			break // the torn tail of a killed run
		}
		seen[record.ID] = true
		kept += len(line)
	}
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := file.Truncate(int64(kept)); err != nil {
		return nil, err
	}
	if _, err := file.Seek(int64(kept), 0); err != nil {
		return nil, err
	}
	return &handledLog{file: file, seen: seen}, nil
}

// handleOnce records the event unless its id was handled before; true when it was new.
func (h *handledLog) handleOnce(id string, body []byte) (bool, error) {
	if h.seen[id] {
		return false, nil
	}
	// Your handling goes here; its record carries the id and is on disk before the ack.
	line := append(bytes.TrimSpace(body), '\n')
	if _, err := h.file.Write(line); err != nil {
		return false, err
	}
	if err := h.file.Sync(); err != nil {
		return false, err
	}
	h.seen[id] = true
	return true, nil
}

// fetch asks for up to `batchSize` events, waiting at most a second for them to arrive; a
// status reply (404: none pending, 408: the wait expired) ends the batch early.
func fetch(nc *nats.Conn, replies *nats.Subscription, next, inbox string) ([]*nats.Msg, error) {
	request := fmt.Sprintf(`{"batch":%d,"expires":%d}`, batchSize, time.Second.Nanoseconds())
	if err := nc.PublishRequest(next, inbox, []byte(request)); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var batch []*nats.Msg
	for len(batch) < batchSize {
		message, err := replies.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) {
			break
		} else if err != nil {
			return nil, err
		}
		if message.Header.Get("Status") != "" {
			break
		}
		batch = append(batch, message)
	}
	return batch, nil
}

func main() {
	var servers, name, seed, ca, schemasDir, storePath string
	flag.StringVar(&servers, "nats", "nats://127.0.0.1:4222", "server URLs, comma-separated")
	flag.StringVar(&name, "name", "", "the subscriber (and consumer) name")
	flag.StringVar(&seed, "seed", "", "the subscriber's nkey seed file")
	flag.StringVar(&ca, "ca", "", "CA file of the servers' certificate (TLS)")
	flag.StringVar(&schemasDir, "schemas", "", "the published proto/schemas folder")
	flag.StringVar(&storePath, "store", "", "the file of handled events (JSON lines)")
	flag.Parse()
	if name == "" || seed == "" || schemasDir == "" || storePath == "" {
		log.Fatal("-name, -seed, -schemas and -store are required")
	}
	schemas, err := loadSchemas(schemasDir)
	if err != nil {
		log.Fatal(err)
	}
	handled, err := openHandled(storePath)
	if err != nil {
		log.Fatal(err)
	}
	auth, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		log.Fatal(err)
	}
	options := []nats.Option{
		auth,
		nats.Name("subscriber-" + name),
		nats.CustomInboxPrefix("_INBOX_" + name), // the only inbox its identity may use
		nats.MaxReconnects(-1),
	}
	if ca != "" {
		options = append(options, nats.RootCAs(ca))
	}
	nc, err := nats.Connect(servers, options...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	// Pull from the consumer `bus subscriber add` made (the identity may not create one) with
	// the JetStream API's own request, CONSUMER.MSG.NEXT, answered on the subscriber's inbox.
	inbox := nc.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		log.Fatal(err)
	}
	next := fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, name)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	newCount, skipped := 0, 0
	out := bufio.NewWriter(os.Stdout)
	for {
		select {
		case <-stop:
			return
		default:
		}
		batch, err := fetch(nc, replies, next, inbox)
		if err != nil {
			log.Fatal(err)
		}
		for _, message := range batch {
			decoder := json.NewDecoder(bytes.NewReader(message.Data))
			decoder.UseNumber()
			var event map[string]interface{}
			if err := decoder.Decode(&event); err != nil {
				log.Printf("invalid event on %s: %v", message.Subject, err)
				_ = message.Term()
				continue
			}
			kind, _ := event["type"].(string)
			schema, known := schemas[kind]
			if !known { // a type newer than our schemas: not ours to judge
				_ = message.Ack()
				continue
			}
			if err := schema.check(event); err != nil {
				log.Printf("invalid %s event: %v", kind, err)
				_ = message.Term() // never valid, never redelivered
				continue
			}
			id, _ := event["id"].(string)
			isNew, err := handled.handleOnce(id, message.Data)
			if err != nil {
				log.Fatal(err) // not acked: it comes again after the restart
			}
			if isNew {
				newCount++
			} else {
				skipped++
			}
			if err := message.Ack(); err != nil {
				log.Printf("ack of %s: %v (it will come again; skipped by id)", id, err)
			}
		}
		if len(batch) > 0 {
			fmt.Fprintf(out, "handled %d, duplicates skipped %d\n", newCount, skipped)
			out.Flush()
		}
	}
}
