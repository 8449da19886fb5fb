/*
 * busy-thread: a tiny process with named threads doing known work, for
 * srvprof's flamegraph / off-CPU tests.
 *
 *   busy [--spin-fn | --spin-alt] [--block-fn] [--seconds N]
 *
 * --spin-fn   thread "srvprof-spin" burns CPU inside srvprof_busy_spin()
 * --spin-alt  the same thread burns it inside srvprof_busy_churn() instead
 * --block-fn  thread "srvprof-block" blocks in poll(2) on a pipe nobody writes
 *             to, 10 ms timeout, inside srvprof_block_wait()
 * --seconds N exit 0 after N seconds (default: run until SIGTERM/SIGINT)
 * The main thread is named "srvprof-busy". "ready" is printed on stdout once
 * every thread runs under its name. Build (see run): gcc -O1 -g -fno-omit-frame-pointer
 * -mno-omit-leaf-frame-pointer -fno-inline -pthread -rdynamic
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long srvprof_busy_sink;

__attribute__((noinline)) void srvprof_busy_publish(unsigned long x)
{
	srvprof_busy_sink = x;
}

/* Burns CPU in this very function, ~a few ms per call. It calls
 * srvprof_busy_publish once at the end only so that it is not a leaf: gcc 12
 * omits the frame pointer in leaf functions even with -fno-omit-frame-pointer,
 * which would hide the caller (spin_main) from frame-pointer unwinders. */
__attribute__((noinline)) unsigned long srvprof_busy_spin(unsigned long iters)
{
	unsigned long x = srvprof_busy_sink + 1;
	for (unsigned long i = 0; i < iters; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x)); /* keep the loop */
	}
	srvprof_busy_publish(x);
	return x;
}

/* srvprof_busy_spin under another name: the same work, for a run to compare. */
__attribute__((noinline)) unsigned long srvprof_busy_churn(unsigned long iters)
{
	unsigned long x = srvprof_busy_sink + 2;
	for (unsigned long i = 0; i < iters; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x)); /* keep the loop */
	}
	srvprof_busy_publish(x);
	return x;
}

static unsigned long (*spin_fn)(unsigned long) = srvprof_busy_spin;

/* poll(2) issued from this very function on x86-64 (inline syscall), so that
 * a frame-pointer unwind of the blocked thread reads srvprof_block_wait ->
 * block_main -> start_thread (libc's poll() has no frame pointer and would
 * hide its caller). */
static inline __attribute__((always_inline)) int direct_poll(struct pollfd *p, unsigned long n, int timeout_ms)
{
#if defined(__x86_64__)
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(7L /* SYS_poll */), "D"(p), "S"(n), "d"((long)timeout_ms)
			 : "rcx", "r11", "memory");
	return (int)ret;
#else
	return poll(p, n, timeout_ms);
#endif
}

/* Blocks up to 10 ms waiting for a pipe that never becomes readable. */
__attribute__((noinline)) int srvprof_block_wait(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int n = direct_poll(&p, 1, 10);
	if (n > 0) {
		char buf[64];
		if (read(fd, buf, sizeof buf) < 0)
			return -1;
	}
	return n;
}

/* Posted by each thread once it has its name: "ready" waits for them. */
static sem_t named;

static void *spin_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "srvprof-spin", 0, 0, 0);
	sem_post(&named);
	for (;;)
		spin_fn(1000000);
	return NULL;
}

static void *block_main(void *arg)
{
	int fd = *(int *)arg;
	prctl(PR_SET_NAME, "srvprof-block", 0, 0, 0);
	sem_post(&named);
	for (;;)
		srvprof_block_wait(fd);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: busy [--spin-fn | --spin-alt] [--block-fn] [--seconds N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int spin = 0, block = 0;
	long seconds = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--spin-fn"))
			spin = 1;
		else if (!strcmp(argv[i], "--spin-alt"))
			spin = 1, spin_fn = srvprof_busy_churn;
		else if (!strcmp(argv[i], "--block-fn"))
			block = 1;
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atol(argv[++i]);
		else
			usage();
	}
	if (!spin && !block)
		usage();
	prctl(PR_SET_NAME, "srvprof-busy", 0, 0, 0);

	/* Block SIGTERM/SIGINT in all threads; main waits for them. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	static int pipefd[2];
	pthread_t t;
	sem_init(&named, 0, 0);
	if (spin && pthread_create(&t, NULL, spin_main, NULL) != 0) {
		perror("pthread_create");
		return 1;
	}
	if (block) {
		if (pipe(pipefd) != 0 || pthread_create(&t, NULL, block_main, &pipefd[0]) != 0) {
			perror("block thread");
			return 1;
		}
	}
	/* Only once every thread runs under its name: a test looks them up by it. */
	for (int n = spin + block; n > 0; n--)
		while (sem_wait(&named) != 0)
			;
	printf("ready\n");
	fflush(stdout);

	if (seconds > 0) {
		struct timespec ts = {.tv_sec = seconds};
		siginfo_t si;
		sigtimedwait(&set, &si, &ts);
	} else {
		int sig;
		sigwait(&set, &sig);
	}
	return 0;
}
