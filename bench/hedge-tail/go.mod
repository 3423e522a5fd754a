module github.com/gosleuth/gosleuth/bench/hedge-tail

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/cristalhq/hedgedhttp v0.9.1
	github.com/gosleuth/gosleuth v0.0.0
)

replace github.com/gosleuth/gosleuth => ../..
