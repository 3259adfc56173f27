// counter-go: the sigx counter in Go. An actor per key counts "incr" calls; SIGTERM drains it.
package main

import (
	"context"
	"log"
	"os/signal"
	"strconv"
	"syscall"

	"example.invalid/sigx/sdk/go/sigx"
)

// Counter keeps its count in the sidecar's state store: it survives deactivation and restarts.
type Counter struct{}

func (Counter) Invoke(ctx context.Context, method string, _ []byte) ([]byte, error) {
	if method != "incr" {
		return nil, &sigx.ActorError{Kind: sigx.KindInvalid, Message: "Counter answers incr, not " + method}
	}
	st := sigx.StorageFromContext(ctx)
	var n int
	if _, err := st.GetJSON(ctx, "count", &n); err != nil {
		return nil, err
	}
	n++
	if err := st.PutJSON("count", n); err != nil { // durable once the turn answers
		return nil, err
	}
	return []byte(strconv.Itoa(n)), nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	client, err := sigx.Dial("") // $SIGX_SOCKET
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	app := sigx.NewApp("counter-go")
	app.RegisterActor("Counter", func() sigx.Actor { return Counter{} }, sigx.ActorOptions{Methods: []string{"incr"}})
	if err := app.Run(ctx, client, sigx.ServeOptions{}); err != nil {
		log.Fatal(err)
	}
}
