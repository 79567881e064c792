// Command echo is the test backend of Ferrule's cluster tests: an HTTP server
// answering every request with JSON that names the pod it runs in and the
// request it saw. Standard library only, built static (CGO_ENABLED=0) into the
// image ferrule.local/echo:dev by image/build.sh.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	listen := flag.String("listen", ":8080", "address to listen on")
	flag.Parse()
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		local := ""
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			local = a.String()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"pod":     name,
			"backend": local,
			"method":  r.Method,
			"host":    r.Host,
			"path":    r.URL.RequestURI(),
			"headers": r.Header,
		})
	})
	log.Printf("echo %s listening on %s", name, *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
