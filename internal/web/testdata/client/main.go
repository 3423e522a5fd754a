// Command client makes HTTP requests for the web package's tests, run as
// another user than the dashboard's: "client TOKEN METHOD URL..." sends
// each request with the token as a bearer header and prints one line per
// request, "METHOD URL STATUS" (STATUS -1 when the request failed).
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 4 || len(os.Args)%2 != 0 {
		fmt.Fprintln(os.Stderr, "usage: client TOKEN METHOD URL [METHOD URL...]")
		os.Exit(2)
	}
	c := &http.Client{Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i := 2; i < len(os.Args); i += 2 {
		req, err := http.NewRequest(os.Args[i], os.Args[i+1], nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		req.Header.Set("Authorization", "Bearer "+os.Args[1])
		status := -1
		if resp, err := c.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		} else {
			fmt.Fprintln(os.Stderr, err)
		}
		fmt.Printf("%s %s %d\n", os.Args[i], os.Args[i+1], status)
	}
}
