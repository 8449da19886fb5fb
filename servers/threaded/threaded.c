/*
 * threaded: an HTTP/1.1 server, one thread per connection, with causes of a
 * tail built in for srvprof's tests (each known by construction).
 *
 *   threaded --port PORT [--backlog N] [--no-keepalive]
 *            [--hold-ms H] [--every-ms E] [--hold-on spin|pipe]
 *            [--touch-file PATH --touch-mb M [--touch-pages N] [--touch-anon]]
 *            [--slow-after-ms A --slow-for-ms B --slow-us N]
 *            [--wait-every N --wait-ms M [--wait-on sleep|pipe|unix|udp|udp-sendto|cpu|flock|child]]
 *            [--lock-file PATH]
 *            [--wait-every N --upstream IP:PORT [--upstream-pool K]]
 *            [--pool W] [--stall-every-ms E --stall-ms M] [--split-writes [--split-every N]]
 *
 * One thread per connection ("conn"), each taking the lock `table` for every
 * request to bump a counter (a few instructions). With --hold-ms H > 0 a
 * thread named "cache-refresh" takes the same lock every E ms (default 100)
 * and holds it H ms, spinning on a CPU, as a cache rebuilt under its lock
 * would: requests that arrive meanwhile queue on the lock's futex behind it.
 * With --hold-on pipe it holds the lock asleep instead, reading from a pipe the
 * answer the "ticket" thread writes H ms after it is asked, in rebuild_cache(),
 * as a cache refreshed from a slow source under its lock would.
 * With --hold-ms 0 (default) there is no such thread: the same server, clean.
 *
 * With --touch-mb M every request also reads one byte of each of N random 4 KiB
 * pages (--touch-pages N, default 1)
 * of PATH, an M MiB file it creates, writes back, drops from the page cache
 * and maps (in touch_page()): where the
 * file's pages are not in memory (a memory cgroup too small for them), each
 * such read is a major page fault, and bringing a page in may first reclaim
 * another. With --touch-anon the M MiB are anonymous memory instead, written
 * (not read) by each touch: first touched during requests, so charged to the
 * memory cgroup the server is in by then; past its limit the kernel swaps
 * pages out, and touching one again is a major fault that swaps it in.
 * With --slow-for-ms B > 0, the requests from A ms after the first request the
 * server saw until B ms later each spin N us on the CPU in slow_path(): slow
 * seconds that run a known function, the rest of the run fast.
 * With --wait-every N > 0, every N-th request the server counts waits M ms in
 * wait_for_ticket() before its answer: asleep in nanosleep (--wait-on sleep,
 * the default), or reading a byte from a pipe that a thread named "ticket"
 * writes M ms after it is asked (--wait-on pipe; a UNIX socket with --wait-on
 * unix), or asking the ticket thread over UDP as a DNS lookup asks its server
 * (--wait-on udp: a socket of its own connected to 127.0.0.1 on the server's
 * port, one datagram sent, a poll of that one descriptor, then the answer read,
 * as glibc's resolver does; --wait-on udp-sendto: the socket left unconnected,
 * the datagram sent with sendto and the answer read with recvfrom, as a
 * client of a datagram protocol that talks to several servers on one socket
 * does), or spinning on the CPU in
 * slow_path() (--wait-on cpu), or for a file lock the ticket thread holds M ms
 * (--wait-on flock: flock() on the --lock-file PATH, in lock_the_file()), or for a
 * helper program it runs, `sleep` for M ms (--wait-on child: posix_spawn, then
 * waitpid, in run_helper()). A cause no request pattern
 * of its own shows: the tail is those requests, the median is not touched.
 * With --upstream IP:PORT instead, that request asks another HTTP server: it
 * connects, sends "GET /" and reads the answer until the upstream closes, in
 * ask_upstream(), as a thread-per-connection server calls a dependency. With
 * --upstream-pool K it opens K keep-alive connections at start instead, and each
 * ask takes one (or opens one more when all are taken), as a connection pool does.
 * With --pool W the connection threads hand each request's work (wait_for_ticket
 * and slow_path above) to W threads named "worker" through a queue, and wait for
 * it to be done, as a server with a worker pool behind its I/O threads does.
 * With --stall-ms M > 0 the thread that accepts (the main thread, blocked in
 * accept() otherwise) stops every E ms (--stall-every-ms, default 1000; at its
 * first accept after that) for M ms in housekeeping(), asleep in nanosleep, as
 * an acceptor that also rotates a log or reloads its configuration would:
 * connections that arrive meanwhile wait in the listening socket's accept
 * queue, the connection threads idle.
 * With --split-writes each answer (every N-th with --split-every N) is written
 * in two calls, its headers then its body, on a connection left with Nagle's algorithm on (no TCP_NODELAY), as a
 * server that writes as it formats would: the body waits in the socket until
 * the client acknowledges the headers, and a client that delays its ACKs
 * (Linux: 40 ms at least) sends that ACK only when its timer fires.
 * Answers every request "200 ok"; exits on SIGTERM/SIGINT (default action).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdatomic.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t table = PTHREAD_MUTEX_INITIALIZER;
static unsigned long hits;
static long hold_ms, every_ms = 100;
/* --hold-on pipe: the refresher holds the lock asleep on the ticket thread's pipe. */
static int hold_on_pipe;
static int keepalive = 1;
/* --split-writes [--split-every N]: every N-th answer in two writes, Nagle left on. */
static int split_writes;
static long split_every = 1;
static atomic_long answers;
static long pool_size;
static const char *touch_file;
static long touch_mb, touch_pages = 1;
static int touch_anon;
static volatile unsigned char *pages;
static size_t page_count;
static volatile unsigned long touched;
static long slow_after_ms, slow_for_ms, slow_us;
static long first_request_ns;
static long wait_every, wait_ms;
static int wait_on_pipe, wait_on_cpu, wait_on_unix, wait_on_udp, wait_on_flock, wait_on_child;
/* --wait-on udp-sendto: the UDP ask's socket is not connected. */
static int udp_unconnected;
/* --wait-on flock: the file both the ticket thread and a waiting request lock (--lock-file). */
static const char *lock_file;
static int ticket_lock_fd = -1;
static atomic_int lock_held;
extern char **environ;
/* --wait-on udp: the ticket thread's socket, bound to 127.0.0.1 on the server's port. */
static int ticket_udp = -1;
static struct sockaddr_in ticket_addr;
static int ask_pipe[2];
static struct sockaddr_in upstream;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static int pool[64], pooled, keep_upstream;
static long stall_every_ms = 1000, stall_ms;

static long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* What a waiting request asks the ticket thread: write a byte to `fd` at `due_ns`; with
 * fd -1 (--wait-on flock), hold the lock file from now until `due_ns`. */
struct ask {
	int fd;
	long due_ns;
};

/* Asks the ticket thread for a byte due at `due_ns` and reads it from a pipe (a UNIX socket
 * with `on_unix`). Inlined: the wait is named by the function that asked, not by this one. */
__attribute__((always_inline)) static inline void ask_ticket(long due_ns, int on_unix)
{
	int answer[2];
	if (on_unix ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, answer) : pipe2(answer, O_CLOEXEC))
		return;
	struct ask a = {.fd = answer[1], .due_ns = due_ns};
	char c;
	if (write(ask_pipe[1], &a, sizeof(a)) == (ssize_t)sizeof(a))
		while (read(answer[0], &c, 1) < 0 && errno == EINTR)
			;
	else
		close(answer[1]);
	close(answer[0]);
}

__attribute__((noinline)) static void rebuild_cache(long ns)
{
	if (hold_on_pipe) {
		ask_ticket(now_ns() + ns, 0);
		return;
	}
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

/* Spins `us` microseconds on the CPU. */
__attribute__((noinline)) static void slow_path(long us)
{
	long until = now_ns() + us * 1000;
	while (now_ns() < until)
		__asm__ volatile("" ::: "memory");
}

/* Whether this request falls in the slow window (the first request starts the clock). */
static int in_slow_window(void)
{
	if (slow_for_ms <= 0)
		return 0;
	long now = now_ns();
	long first = __atomic_load_n(&first_request_ns, __ATOMIC_RELAXED);
	if (!first) {
		long zero = 0;
		__atomic_compare_exchange_n(&first_request_ns, &zero, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		first = __atomic_load_n(&first_request_ns, __ATOMIC_RELAXED);
	}
	long since_ms = (now - first) / 1000000;
	return since_ms >= slow_after_ms && since_ms < slow_after_ms + slow_for_ms;
}

/* The "ticket" thread: answers each ask when it is due. Asks come in the order they fall due,
 * so one thread answers each on time. */
static void *ticket_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ticket");
	struct ask a;
	while (read(ask_pipe[0], &a, sizeof(a)) == (ssize_t)sizeof(a)) {
		struct timespec due = {.tv_sec = a.due_ns / 1000000000L, .tv_nsec = a.due_ns % 1000000000L};
		if (a.fd < 0) {
			if (flock(ticket_lock_fd, LOCK_EX))
				perror("threaded: ticket's flock");
			atomic_store(&lock_held, 1);
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
				;
			atomic_store(&lock_held, 0);
			flock(ticket_lock_fd, LOCK_UN);
			continue;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
		char c = 1;
		if (write(a.fd, &c, 1) != 1)
			perror("threaded: ticket");
		close(a.fd);
	}
	return NULL;
}

/* The "ticket" thread of --wait-on udp: answers each datagram, which holds when it is due, at that
 * time; a datagram of any other length (another server's ask) wait_ms after it arrived. Asks come
 * in the order they fall due, so one thread answers each on time. */
static void *ticket_udp_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ticket");
	for (;;) {
		long due_ns;
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t got = recvfrom(ticket_udp, &due_ns, sizeof(due_ns), 0, (struct sockaddr *)&from, &len);
		if (got <= 0)
			continue;
		if (got != (ssize_t)sizeof(due_ns))
			due_ns = now_ns() + wait_ms * 1000000L;
		struct timespec due = {.tv_sec = due_ns / 1000000000L, .tv_nsec = due_ns % 1000000000L};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
		char c = 1;
		if (sendto(ticket_udp, &c, 1, 0, (struct sockaddr *)&from, len) != 1)
			perror("threaded: ticket");
	}
	return NULL;
}

/* Asks the ticket thread over UDP as glibc's resolver asks a DNS server: a connected socket of its
 * own, one datagram, a poll of that descriptor until the answer, a read that does not wait. */
__attribute__((noinline)) static void ask_over_udp(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return;
	long due_ns = now_ns() + wait_ms * 1000000L;
	struct pollfd p = {.fd = s, .events = POLLIN};
	char c;
	int sent = udp_unconnected
			   ? sendto(s, &due_ns, sizeof(due_ns), 0, (struct sockaddr *)&ticket_addr,
				    sizeof(ticket_addr)) == (ssize_t)sizeof(due_ns)
			   : !connect(s, (struct sockaddr *)&ticket_addr, sizeof(ticket_addr)) &&
				     send(s, &due_ns, sizeof(due_ns), 0) == (ssize_t)sizeof(due_ns);
	if (sent)
		while (poll(&p, 1, 5000) < 0 && errno == EINTR)
			;
	(void)!recvfrom(s, &c, 1, 0, NULL, NULL);
	close(s);
}

static int upstream_connection(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&upstream, sizeof(upstream))) {
		close(s);
		return -1;
	}
	return s;
}

/* Reads one answer: its headers, then Content-Length bytes of body; 0 when whole. */
static int read_answer(int s)
{
	char buf[4096];
	size_t have = 0;
	char *end = NULL;
	while (!end) {
		ssize_t n = read(s, buf + have, sizeof(buf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		have += (size_t)n;
		buf[have] = 0;
		end = strstr(buf, "\r\n\r\n");
		if (!end && have >= sizeof(buf) - 1)
			return -1;
	}
	const char *length = strcasestr(buf, "content-length:");
	long body = length ? atol(length + 15) : 0;
	for (long got = (long)(buf + have - (end + 4)); got < body;) {
		ssize_t n = read(s, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += n;
	}
	return 0;
}

/* One HTTP request to the upstream: on a connection of its own, read until it closes, or on a
 * pooled keep-alive one, read to the answer's end. */
__attribute__((noinline)) static void ask_upstream(void)
{
	static const char once[] = "GET / HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n";
	static const char kept[] = "GET / HTTP/1.1\r\nHost: upstream\r\n\r\n";
	int s = -1;
	if (keep_upstream) {
		pthread_mutex_lock(&pool_lock);
		if (pooled > 0)
			s = pool[--pooled];
		pthread_mutex_unlock(&pool_lock);
	}
	if (s < 0 && (s = upstream_connection()) < 0)
		return;
	const char *ask = keep_upstream ? kept : once;
	size_t len = strlen(ask);
	char buf[4096];
	if (write(s, ask, len) != (ssize_t)len) {
		close(s);
		return;
	}
	if (!keep_upstream) {
		for (ssize_t n = 1; n > 0 || (n < 0 && errno == EINTR);)
			n = read(s, buf, sizeof(buf));
		close(s);
		return;
	}
	if (read_answer(s)) {
		close(s);
		return;
	}
	pthread_mutex_lock(&pool_lock);
	if (pooled < (int)(sizeof(pool) / sizeof(pool[0])))
		pool[pooled++] = s, s = -1;
	pthread_mutex_unlock(&pool_lock);
	if (s >= 0)
		close(s);
}

/* Takes the lock file the ticket thread holds for wait_ms, as a request that appends to a file
 * another thread rewrites would: on a descriptor of its own, asleep in flock until released. */
__attribute__((noinline)) static void lock_the_file(void)
{
	int fd = open(lock_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct ask a = {.fd = -1, .due_ns = now_ns() + wait_ms * 1000000L};
	if (write(ask_pipe[1], &a, sizeof(a)) == (ssize_t)sizeof(a))
		while (!atomic_load(&lock_held) && now_ns() < a.due_ns)
			sched_yield();
	flock(fd, LOCK_EX);
	flock(fd, LOCK_UN);
	close(fd);
}

/* Runs a helper program and waits for it, as a request that shells out would: `sleep` for
 * wait_ms, the thread asleep in waitpid until it exits. */
__attribute__((noinline)) static void run_helper(void)
{
	char seconds[32];
	snprintf(seconds, sizeof(seconds), "%ld.%03ld", wait_ms / 1000, wait_ms % 1000);
	char *argv[] = {"sleep", seconds, NULL};
	pid_t pid;
	if (posix_spawn(&pid, "/bin/sleep", NULL, NULL, argv, environ))
		return;
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Every wait_every-th request waits wait_ms: asleep, or reading the ticket thread's answer from
 * a pipe of its own, or for a file lock or a helper program; or asks the upstream. */
__attribute__((noinline)) static void wait_for_ticket(void)
{
	static unsigned long requests;
	if (wait_every <= 0 || __atomic_add_fetch(&requests, 1, __ATOMIC_RELAXED) % wait_every)
		return;
	if (upstream.sin_port) {
		ask_upstream();
		return;
	}
	if (wait_on_cpu) {
		slow_path(wait_ms * 1000);
		return;
	}
	if (wait_on_udp) {
		ask_over_udp();
		return;
	}
	if (wait_on_flock) {
		lock_the_file();
		return;
	}
	if (wait_on_child) {
		run_helper();
		return;
	}
	if (!wait_on_pipe) {
		struct timespec gap = {.tv_sec = wait_ms / 1000, .tv_nsec = (wait_ms % 1000) * 1000000L};
		nanosleep(&gap, NULL);
		return;
	}
	ask_ticket(now_ns() + wait_ms * 1000000L, wait_on_unix);
}

/* Reads one byte of a page picked by a per-thread xorshift generator. */
__attribute__((noinline)) static void touch_page(unsigned long *seed)
{
	unsigned long x = *seed;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*seed = x;
	volatile unsigned char *page = pages + (x % page_count) * 4096;
	if (touch_anon)
		*page = (unsigned char)x;
	else
		touched += *page;
}

/* Creates PATH of touch_mb MiB (nonzero bytes), drops it from the page cache
 * and maps it. */
static int map_pages(void)
{
	if (touch_anon) {
		/* Untouched: each page is allocated where a request first writes it. */
		page_count = ((size_t)touch_mb << 20) / 4096;
		pages = mmap(NULL, page_count * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return pages == MAP_FAILED ? -1 : 0;
	}
	int fd = open(touch_file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	size_t len = (size_t)touch_mb << 20;
	char page[4096];
	memset(page, 1, sizeof(page));
	for (size_t off = 0; off < len; off += sizeof(page))
		if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
			return -1;
	/* Written back and dropped: none of its pages is in memory to begin with. */
	if (fdatasync(fd) || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED))
		return -1;
	pages = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	/* Random lookups: a fault reads its page alone, no read-around. */
	if (pages == MAP_FAILED || madvise((void *)pages, len, MADV_RANDOM))
		return -1;
	page_count = len / 4096;
	return 0;
}

/* What a request does besides answering: the waits and spins built in. */
static void do_work(void)
{
	wait_for_ticket();
	if (in_slow_window())
		slow_path(slow_us);
}

/* A request's work handed to the pool: queued, then waited for until a worker has done it. */
struct job {
	int done;
	pthread_cond_t cond;
	struct job *next;
};
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_ready = PTHREAD_COND_INITIALIZER;
static struct job *jobs_head, **jobs_tail = &jobs_head;

__attribute__((noinline)) static void hand_to_pool(void)
{
	struct job j = {.done = 0, .next = NULL};
	pthread_cond_init(&j.cond, NULL);
	pthread_mutex_lock(&jobs_lock);
	*jobs_tail = &j;
	jobs_tail = &j.next;
	pthread_cond_signal(&jobs_ready);
	while (!j.done)
		pthread_cond_wait(&j.cond, &jobs_lock);
	pthread_mutex_unlock(&jobs_lock);
	pthread_cond_destroy(&j.cond);
}

static void *worker_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "worker");
	for (;;) {
		pthread_mutex_lock(&jobs_lock);
		while (!jobs_head)
			pthread_cond_wait(&jobs_ready, &jobs_lock);
		struct job *j = jobs_head;
		jobs_head = j->next;
		if (!jobs_head)
			jobs_tail = &jobs_head;
		pthread_mutex_unlock(&jobs_lock);
		do_work();
		pthread_mutex_lock(&jobs_lock);
		j->done = 1;
		pthread_cond_signal(&j->cond);
		pthread_mutex_unlock(&jobs_lock);
	}
	return NULL;
}

/* The answer as a server that writes as it formats sends it: headers, then
 * body. Nonzero when the connection failed. */
static int write_in_two(int fd, const char *answer, size_t len)
{
	size_t head = (size_t)(strstr(answer, "\r\n\r\n") + 4 - answer);
	return write(fd, answer, head) != (ssize_t)head ||
	       write(fd, answer + head, len - head) != (ssize_t)(len - head);
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
	unsigned long seed = (unsigned long)now_ns() * 2654435761UL + (unsigned long)fd + 1;
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
			if (pool_size > 0)
				hand_to_pool();
			else
				do_work();
			for (long p = 0; pages && p < touch_pages; p++)
				touch_page(&seed);
			int split = split_writes && atomic_fetch_add(&answers, 1) % split_every == 0;
			if (split ? write_in_two(fd, ok, ok_len) : write(fd, ok, ok_len) != (ssize_t)ok_len) {
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

/* The acceptor's periodic chore: M ms away from its accept. */
__attribute__((noinline)) static void housekeeping(void)
{
	struct timespec gap = {stall_ms / 1000, (stall_ms % 1000) * 1000000L};
	nanosleep(&gap, NULL);
}

/* The next connection, the acceptor's chore first when one is due: blocked in
 * accept() otherwise, as most acceptors are. */
static int next_connection(int s)
{
	static long next_stall_ns;
	if (stall_ms > 0) {
		long now = now_ns();
		if (!next_stall_ns)
			next_stall_ns = now + stall_every_ms * 1000000L;
		if (now >= next_stall_ns) {
			housekeeping();
			next_stall_ns = now_ns() + stall_every_ms * 1000000L;
		}
	}
	return accept(s, NULL, NULL);
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
		else if (!strcmp(a, "--hold-on") && v && (!strcmp(v, "spin") || !strcmp(v, "pipe")))
			hold_on_pipe = !strcmp(v, "pipe"), i++;
		else if (!strcmp(a, "--touch-file") && v)
			touch_file = v, i++;
		else if (!strcmp(a, "--touch-mb") && v)
			touch_mb = atol(v), i++;
		else if (!strcmp(a, "--touch-pages") && v)
			touch_pages = atol(v), i++;
		else if (!strcmp(a, "--touch-anon"))
			touch_anon = 1;
		else if (!strcmp(a, "--no-keepalive"))
			keepalive = 0;
		else if (!strcmp(a, "--slow-after-ms") && v)
			slow_after_ms = atol(v), i++;
		else if (!strcmp(a, "--slow-for-ms") && v)
			slow_for_ms = atol(v), i++;
		else if (!strcmp(a, "--slow-us") && v)
			slow_us = atol(v), i++;
		else if (!strcmp(a, "--wait-every") && v)
			wait_every = atol(v), i++;
		else if (!strcmp(a, "--wait-ms") && v)
			wait_ms = atol(v), i++;
		else if (!strcmp(a, "--wait-on") && v &&
			 (!strcmp(v, "sleep") || !strcmp(v, "pipe") || !strcmp(v, "unix") || !strcmp(v, "cpu") ||
			  !strcmp(v, "udp") || !strcmp(v, "udp-sendto") || !strcmp(v, "flock") ||
			  !strcmp(v, "child")))
			wait_on_unix = !strcmp(v, "unix"), wait_on_pipe = wait_on_unix || !strcmp(v, "pipe"),
			wait_on_cpu = !strcmp(v, "cpu"), udp_unconnected = !strcmp(v, "udp-sendto"),
			wait_on_udp = udp_unconnected || !strcmp(v, "udp"),
			wait_on_flock = !strcmp(v, "flock"), wait_on_child = !strcmp(v, "child"), i++;
		else if (!strcmp(a, "--lock-file") && v)
			lock_file = v, i++;
		else if (!strcmp(a, "--upstream") && v && strchr(v, ':')) {
			char ip[64];
			snprintf(ip, sizeof(ip), "%.*s", (int)(strchr(v, ':') - v), v);
			upstream.sin_family = AF_INET;
			upstream.sin_port = htons((unsigned short)atoi(strchr(v, ':') + 1));
			if (inet_pton(AF_INET, ip, &upstream.sin_addr) != 1 || !upstream.sin_port) {
				fprintf(stderr, "threaded: --upstream takes IPV4:PORT, not %s\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--pool") && v)
			pool_size = atol(v), i++;
		else if (!strcmp(a, "--upstream-pool") && v)
			keep_upstream = atoi(v), i++;
		else if (!strcmp(a, "--stall-every-ms") && v)
			stall_every_ms = atol(v), i++;
		else if (!strcmp(a, "--split-writes"))
			split_writes = 1;
		else if (!strcmp(a, "--split-every") && v)
			split_every = atol(v), i++;
		else if (!strcmp(a, "--stall-ms") && v)
			stall_ms = atol(v), i++;
		else {
			fprintf(stderr, "threaded: unknown argument %s\n", a);
			return 2;
		}
	}
	if (port <= 0 || split_every < 1 || hold_ms < 0 || every_ms <= hold_ms || stall_ms < 0 || stall_every_ms <= stall_ms || touch_mb < 0 || (touch_mb > 0 && !touch_file)) {
		fprintf(stderr, "threaded: needs --port PORT, --split-every of 1 or more, --hold-ms below --every-ms, --stall-ms below --stall-every-ms, and --touch-file with --touch-mb\n");
		return 2;
	}
	for (; pooled < keep_upstream && pooled < (int)(sizeof(pool) / sizeof(pool[0])); pooled++)
		if ((pool[pooled] = upstream_connection()) < 0) {
			perror("threaded: --upstream-pool");
			return 1;
		}
	if (touch_mb > 0 && map_pages()) {
		perror("threaded: --touch-file");
		return 1;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *)&addr, sizeof(addr)) || listen(s, backlog)) {
		perror("threaded: bind/listen");
		return 1;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t;
	if (wait_on_flock && (!lock_file || (ticket_lock_fd = open(lock_file, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)) {
		perror("threaded: --wait-on flock needs --lock-file");
		return 1;
	}
	if ((wait_on_pipe || wait_on_flock || hold_on_pipe) && (pipe2(ask_pipe, O_CLOEXEC) || pthread_create(&t, &attr, ticket_main, NULL))) {
		perror("threaded: the ticket thread");
		return 1;
	}
	if (wait_on_udp) {
		ticket_addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
		ticket_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ticket_udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (ticket_udp < 0 || bind(ticket_udp, (struct sockaddr *)&ticket_addr, sizeof(ticket_addr)) ||
		    pthread_create(&t, &attr, ticket_udp_main, NULL)) {
			perror("threaded: the UDP ticket thread");
			return 1;
		}
	}
	for (long w = 0; w < pool_size; w++)
		if (pthread_create(&t, &attr, worker_main, NULL)) {
			perror("threaded: --pool");
			return 1;
		}
	if (hold_ms > 0 && pthread_create(&t, &attr, refresh_main, NULL)) {
		perror("threaded: pthread_create");
		return 1;
	}
	for (;;) {
		int c = next_connection(s);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			perror("threaded: accept");
			return 1;
		}
		if (!split_writes)
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, &attr, conn_main, (void *)(long)c))
			close(c);
	}
}
