package dashboard_test

import (
	"log"
	"net/http"
	"os"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/taskling"
)

// Mount the dashboard, the JSON API and /metrics under /taskling/ in your own server.
func ExampleNewHandler() {
	var client *taskling.Client // from taskling.NewClient
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: os.Getenv("TASKLING_API_TOKEN")})
	if err != nil {
		log.Print(err) // a nil client, as here, is refused
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/taskling/", http.StripPrefix("/taskling", h))
}
