// sleepers NPROC NTHREAD: starts NPROC processes of NTHREAD threads each
// (the main thread included), all blocked in pause(), and waits. Killing the
// parent's process group ends them all. Used by run.sh as a monitored
// population.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *idle(void *arg) {
	(void)arg;
	for (;;) pause();
	return NULL;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: sleepers NPROC NTHREAD\n");
		return 2;
	}
	int nproc = atoi(argv[1]), nthread = atoi(argv[2]);
	for (int p = 0; p < nproc; p++) {
		pid_t pid = fork();
		if (pid < 0) { perror("fork"); return 1; }
		if (pid == 0) {
			for (int t = 1; t < nthread; t++) {
				pthread_t th;
				if (pthread_create(&th, NULL, idle, NULL) != 0) { perror("pthread_create"); return 1; }
			}
			idle(NULL);
		}
	}
	for (;;) pause();
}
