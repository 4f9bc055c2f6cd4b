// A health-probe flood for scripts/server-load.sh (PROBES=N): GET PATH at RATE requests a
// second, spread over CONNECTIONS keep-alive HTTP/1.1 connections to 127.0.0.1:PORT, for SECONDS.
// With BODIES (a file of JSON bodies, one a line) and KEY it POSTs them to PATH instead, in
// turn (RECEIPTS=N: devices' receipts), with `Authorization: Bearer KEY`.
// Written in C so that the load generator itself costs little CPU on a 2-core box (a Python
// asyncio client took most of a core at 2,000 requests a second).
//
//   cc -O2 -o probe-flood Benchmarks/probe-flood.c
//   probe-flood PORT RATE SECONDS [CONNECTIONS] [PATH] [BODIES KEY]
//
// Prints how many were answered, by status class, and how many were skipped because every
// connection was still waiting for an answer (the server falling behind).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 256

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

struct connection {
    int fd;
    int busy;
    char buffer[8192];
    size_t used;
};

// The length of one complete response at the start of `buffer` (head and Content-Length body), or 0.
static size_t complete(const char *buffer, size_t used) {
    const char *end = memmem(buffer, used, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - buffer) + 4;
    size_t length = 0;
    const char *field = memmem(buffer, head, "ontent-Length:", 14);
    if (!field) field = memmem(buffer, head, "ontent-length:", 14);
    if (field) length = strtoul(field + 14, NULL, 10);
    return used >= head + length ? head + length : 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: probe-flood PORT RATE SECONDS [CONNECTIONS] [PATH] [BODIES KEY]\n");
        return 64;
    }
    int port = atoi(argv[1]);
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    int count = argc > 4 ? atoi(argv[4]) : 16;
    const char *path = argc > 5 ? argv[5] : "/healthz";
    if (count < 1 || count > MAX_CONNECTIONS || rate <= 0) return 64;
    static char request[4096];
    int request_length = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    // POST bodies, one a line, sent in turn.
    char **bodies = NULL;
    long body_count = 0, body_next = 0;
    const char *key = argc > 7 ? argv[7] : "";
    if (argc > 6) {
        FILE *file = fopen(argv[6], "r");
        if (!file) {
            perror("bodies");
            return 66;
        }
        char line[2048];
        long capacity = 0;
        while (fgets(line, sizeof line, file)) {
            size_t length = strcspn(line, "\r\n");
            if (length == 0) continue;
            line[length] = 0;
            if (body_count == capacity) {
                capacity = capacity ? capacity * 2 : 1024;
                bodies = realloc(bodies, capacity * sizeof *bodies);
                if (!bodies) return 71;
            }
            bodies[body_count++] = strdup(line);
        }
        fclose(file);
        if (body_count == 0) return 65;
    }

    static struct connection connections[MAX_CONNECTIONS];
    struct pollfd polls[MAX_CONNECTIONS];
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    for (int i = 0; i < count; i++) {
        connections[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(connections[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(connections[i].fd, (struct sockaddr *)&address, sizeof address) != 0) {
            perror("connect");
            return 1;
        }
    }

    long sent = 0, answered = 0, skipped = 0, classes[6] = {0};
    double begin = now(), end = begin + seconds;
    long total = (long)(rate * seconds);
    int next = 0;
    while (1) {
        double t = now();
        // Send what is due by now, each on the next idle connection.
        while (sent + skipped < total && begin + (sent + skipped) / rate <= t) {
            int found = -1;
            for (int k = 0; k < count; k++) {
                int i = (next + k) % count;
                if (!connections[i].busy) {
                    found = i;
                    break;
                }
            }
            if (found < 0) {
                skipped++;
                continue;
            }
            next = (found + 1) % count;
            if (bodies) {
                const char *body = bodies[body_next++ % body_count];
                request_length = snprintf(
                    request, sizeof request,
                    "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n%s",
                    path, key, strlen(body), body);
                if (request_length <= 0 || request_length >= (int)sizeof request) return 65;
            }
            if (write(connections[found].fd, request, request_length) != request_length) {
                perror("write");
                return 1;
            }
            connections[found].busy = 1;
            sent++;
        }
        int waiting = 0;
        for (int i = 0; i < count; i++) {
            polls[i].fd = connections[i].fd;
            polls[i].events = POLLIN;
            waiting += connections[i].busy;
        }
        if (sent + skipped >= total && waiting == 0) break;
        if (t > end + 10) break;  // answers that never come: give up 10 s after the end
        // Sleep until the next request is due or an answer comes (ppoll: to the microsecond,
        // so the loop never spins).
        double due = sent + skipped < total ? begin + (sent + skipped) / rate - now() : 0.1;
        if (due < 0) due = 0;
        struct timespec timeout = {.tv_sec = (time_t)due, .tv_nsec = (long)((due - (time_t)due) * 1e9)};
        if (ppoll(polls, count, &timeout, NULL) < 0 && errno != EINTR) {
            perror("poll");
            return 1;
        }
        for (int i = 0; i < count; i++) {
            if (!(polls[i].revents & POLLIN)) continue;
            struct connection *c = &connections[i];
            ssize_t n = read(c->fd, c->buffer + c->used, sizeof c->buffer - c->used);
            if (n <= 0) {
                fprintf(stderr, "probe-flood: connection %d closed\n", i);
                return 1;
            }
            c->used += (size_t)n;
            size_t length;
            while ((length = complete(c->buffer, c->used)) > 0) {
                int status = atoi(c->buffer + 9);
                if (status >= 100 && status < 600) classes[status / 100]++;
                answered++;
                c->busy = 0;
                memmove(c->buffer, c->buffer + length, c->used - length);
                c->used -= length;
            }
        }
    }
    double elapsed = now() - begin;
    printf("probes: %ld answered in %.2fs (%.0f/s), 2xx %ld, 4xx %ld, 5xx %ld, skipped (all %d connections waiting) %ld\n", answered, elapsed,
           answered / elapsed, classes[2], classes[4], classes[5], count, skipped);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("probe-flood CPU: %.2f s user, %.2f s system\n", usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
           usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6);
    return classes[5] > 0 || answered < sent ? 1 : 0;
}
