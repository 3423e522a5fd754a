module github.com/gosleuth/gosleuth

go 1.26.0

require golang.org/x/sys v0.49.0

require (
	github.com/gdamore/encoding v1.0.1 // indirect
	github.com/gdamore/tcell/v2 v2.13.10 // indirect
	github.com/lucasb-eyer/go-colorful v1.3.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/term v0.37.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
