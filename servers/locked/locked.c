/*
 * locked: an HTTP/1.1 server whose connection threads share one lock with a
 * background thread that holds it for long stretches, for srvprof's
 * lock-contention test (a cause known by construction).
 *
 *   locked --port PORT [--backlog N] [--hold-ms H] [--every-ms E] [--no-keepalive]
 *
 * One thread per connection ("conn"), each taking the lock `table` for every
 * request to bump a counter (a few instructions). With --hold-ms H > 0 a
 * thread named "cache-refresh" takes the same lock every E ms (default 100)
 * and holds it H ms, spinning on a CPU, as a cache rebuilt under its lock
 * would: requests that arrive meanwhile queue on the lock's futex behind it.
 * With --hold-ms 0 (default) there is no such thread: the same server, clean.
 * Answers every request "200 ok"; exits on SIGTERM/SIGINT (default action).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t table = PTHREAD_MUTEX_INITIALIZER;
static unsigned long hits;
static long hold_ms, every_ms = 100;
static int keepalive = 1;

static long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

__attribute__((noinline)) static void rebuild_cache(long ns)
{
	long end = now_ns() + ns;
	while (now_ns() < end)
		;
}

static void *refresh_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "cache-refresh");
	struct timespec gap = {.tv_sec = 0, .tv_nsec = (every_ms - hold_ms) * 1000000L};
	for (;;) {
		nanosleep(&gap, NULL);
		pthread_mutex_lock(&table);
		rebuild_cache(hold_ms * 1000000L);
		pthread_mutex_unlock(&table);
	}
	return NULL;
}

__attribute__((noinline)) static void count_request(void)
{
	pthread_mutex_lock(&table);
	hits++;
	pthread_mutex_unlock(&table);
}

static void *conn_main(void *arg)
{
	int fd = (int)(long)arg;
	pthread_setname_np(pthread_self(), "conn");
	char buf[8192];
	size_t have = 0;
	const char *ok = keepalive
		? "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"
		: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nok\n";
	size_t ok_len = strlen(ok);
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		char *end;
		int closing = 0;
		/* Every complete request in the buffer (bodies are not expected). */
		while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
			count_request();
			if (write(fd, ok, ok_len) != (ssize_t)ok_len) {
				closing = 1;
				break;
			}
			size_t used = (size_t)(end + 4 - buf);
			memmove(buf, end + 4, have - used + 1);
			have -= used;
			if (!keepalive) {
				closing = 1;
				break;
			}
		}
		if (closing || have >= sizeof(buf) - 1)
			break;
	}
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	int port = 0, backlog = 511;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--port") && v)
			port = atoi(v), i++;
		else if (!strcmp(a, "--backlog") && v)
			backlog = atoi(v), i++;
		else if (!strcmp(a, "--hold-ms") && v)
			hold_ms = atol(v), i++;
		else if (!strcmp(a, "--every-ms") && v)
			every_ms = atol(v), i++;
		else if (!strcmp(a, "--no-keepalive"))
			keepalive = 0;
		else {
			fprintf(stderr, "locked: unknown argument %s\n", a);
			return 2;
		}
	}
	if (port <= 0 || hold_ms < 0 || every_ms <= hold_ms) {
		fprintf(stderr, "locked: needs --port PORT, and --hold-ms below --every-ms\n");
		return 2;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *)&addr, sizeof(addr)) || listen(s, backlog)) {
		perror("locked: bind/listen");
		return 1;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t;
	if (hold_ms > 0 && pthread_create(&t, &attr, refresh_main, NULL)) {
		perror("locked: pthread_create");
		return 1;
	}
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			perror("locked: accept");
			return 1;
		}
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, &attr, conn_main, (void *)(long)c))
			close(c);
	}
}
