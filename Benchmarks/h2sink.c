/*
 * h2sink: an HTTP/2 + TLS server that answers every request "200" with an apns-id, as APNs
 * answers a notification it accepts, and does nothing else. The receiver to measure a sender
 * against when the sender is faster than `herald sim` (which checks and stores every request):
 * nghttp2 and OpenSSL, one thread per connection, no Swift and no Herald code.
 *
 *   cc -O2 -o h2sink Benchmarks/h2sink.c -lnghttp2 -lssl -lcrypto -lpthread
 *   h2sink PORT CERT.pem KEY.pem        # prints "h2sink ready on 127.0.0.1:PORT"
 *
 * PORT 0 picks a free port (printed). SIGTERM or SIGINT prints the requests answered and exits.
 * Benchmarks/lib.sh builds it (h2sink_start) for scripts/server-load.sh SINK=1 and apns-send.sh.
 */
#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_long answered;
static SSL_CTX *tls;

struct connection {
    SSL *ssl;
    nghttp2_session *session;
    unsigned char out[1 << 17];
    size_t out_length;
};

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
    (void)user_data;
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        static const char *id = "00000000-0000-0000-0000-000000000000";
        nghttp2_nv headers[] = {
            {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"apns-id", (uint8_t *)id, 7, 36, NGHTTP2_NV_FLAG_NONE},
        };
        nghttp2_submit_response(session, frame->hd.stream_id, headers, 2, NULL);
        atomic_fetch_add_explicit(&answered, 1, memory_order_relaxed);
    }
    return 0;
}

/* Everything nghttp2 has to send, in as few TLS records as the buffer allows. */
static int send_pending(struct connection *c) {
    for (;;) {
        const uint8_t *data;
        ssize_t length = nghttp2_session_mem_send(c->session, &data);
        if (length < 0) return -1;
        if (length == 0) break;
        if (c->out_length + (size_t)length > sizeof c->out) {
            if (c->out_length > 0 && SSL_write(c->ssl, c->out, (int)c->out_length) <= 0) return -1;
            c->out_length = 0;
        }
        if ((size_t)length > sizeof c->out) {
            if (SSL_write(c->ssl, data, (int)length) <= 0) return -1;
            continue;
        }
        memcpy(c->out + c->out_length, data, (size_t)length);
        c->out_length += (size_t)length;
    }
    if (c->out_length > 0) {
        if (SSL_write(c->ssl, c->out, (int)c->out_length) <= 0) return -1;
        c->out_length = 0;
    }
    return 0;
}

static void *serve(void *argument) {
    int fd = (int)(long)argument;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct connection *c = calloc(1, sizeof *c);
    c->ssl = SSL_new(tls);
    SSL_set_fd(c->ssl, fd);
    if (SSL_accept(c->ssl) <= 0) goto done;
    nghttp2_session_callbacks *callbacks;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
    nghttp2_session_server_new(&c->session, callbacks, c);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
    };
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2);
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    unsigned char in[1 << 16];
    while (send_pending(c) == 0) {
        int length = SSL_read(c->ssl, in, sizeof in);
        if (length <= 0) break;
        if (nghttp2_session_mem_recv(c->session, in, (size_t)length) < 0) break;
        if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) break;
    }
    nghttp2_session_del(c->session);
done:
    SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
    close(fd);
    free(c);
    return NULL;
}

static int select_h2(SSL *ssl, const unsigned char **out, unsigned char *out_length, const unsigned char *in,
                     unsigned int in_length, void *argument) {
    (void)ssl;
    (void)argument;
    if (nghttp2_select_next_protocol((unsigned char **)out, out_length, in, in_length) != 1) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    return SSL_TLSEXT_ERR_OK;
}

static void report(int signal) {
    (void)signal;
    fprintf(stderr, "h2sink answered %ld requests\n", atomic_load(&answered));
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: h2sink PORT CERT.pem KEY.pem\n");
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, report);
    signal(SIGINT, report);
    tls = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(tls, argv[2]) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls, argv[3], SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        return 1;
    }
    SSL_CTX_set_alpn_select_cb(tls, select_h2, NULL);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 128) != 0) {
        perror("h2sink: bind");
        return 1;
    }
    socklen_t length = sizeof address;
    getsockname(listener, (struct sockaddr *)&address, &length);
    printf("h2sink ready on 127.0.0.1:%d\n", ntohs(address.sin_port));
    fflush(stdout);
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        pthread_t thread;
        if (pthread_create(&thread, NULL, serve, (void *)(long)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(thread);
    }
}
