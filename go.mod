module github.com/glyd/glyd

go 1.26

require (
	github.com/google/flatbuffers v25.12.19+incompatible // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
