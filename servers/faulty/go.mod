module srvprof/servers/faulty

go 1.22
