/* A minimal libmicrohttpd exporter, the yardstick for sonde's own HTTP server (issue 21):
 *
 *   mhd_exporter PAGE_FILE epoll|pool [THREADS]
 *
 * Serves PAGE_FILE (a page fetched from `sonde serve`) as GET /metrics on 127.0.0.1 (a free port,
 * printed as "port N" on stdout), gzip'd once at start-up and sent as such to a request whose
 * Accept-Encoding names gzip, as sonde sends the page it compresses once per tick.  GET /count
 * answers the number of /metrics answers so far (the bench's CPU per scrape).
 *
 * Modes, the ones libmicrohttpd's manual recommends for many connections: `epoll`, one internal
 * thread on epoll (like sonde's loop); `pool`, a pool of THREADS (default 2) epoll threads.
 * MHD's own bounds are set to sonde's where MHD has one: 1024 connections, 10 s inactivity,
 * backlog 1024.  It stops on SIGTERM/SIGINT. */
#include <microhttpd.h>
#include <zlib.h>

#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct MHD_Response* plain_page;
static struct MHD_Response* gzip_page;
static atomic_ullong answers;

static int read_file(const char* path, char** data, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 20, n = 0;
  char* buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return -1;
  *data = buf;
  *size = n;
  return 0;
}

/* gzip (RFC 1952) of DATA at zlib's default level, as sonde's once-per-tick page. */
static int gzip_once(const char* data, size_t size, char** out, size_t* out_size) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, size);
  *out = malloc(cap);
  z.next_in = (Bytef*)data;
  z.avail_in = (uInt)size;
  z.next_out = (Bytef*)*out;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  *out_size = cap - z.avail_out;
  deflateEnd(&z);
  return rc == Z_STREAM_END ? 0 : -1;
}

/* Whether Accept-Encoding names gzip: a substring, as sonde's accepts_gzip() (cmd_serve.cpp). */
static int wants_gzip(struct MHD_Connection* c) {
  const char* ae = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  return ae && strstr(ae, "gzip") != NULL;
}

static enum MHD_Result handle(void* cls, struct MHD_Connection* c, const char* url,
                              const char* method, const char* version, const char* upload,
                              size_t* upload_size, void** state) {
  (void)cls, (void)version, (void)upload, (void)upload_size;
  if (*state == NULL) { /* first call: the head only; answer on the second */
    *state = c;
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return MHD_NO;
  if (strcmp(url, "/metrics") == 0) {
    atomic_fetch_add_explicit(&answers, 1, memory_order_relaxed);
    return MHD_queue_response(c, MHD_HTTP_OK, wants_gzip(c) ? gzip_page : plain_page);
  }
  if (strcmp(url, "/count") == 0) {
    char text[32];
    int n = snprintf(text, sizeof text, "%llu\n", (unsigned long long)atomic_load(&answers));
    struct MHD_Response* r =
        MHD_create_response_from_buffer((size_t)n, text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
  }
  static char not_found[] = "not found\n";
  struct MHD_Response* r =
      MHD_create_response_from_buffer(sizeof not_found - 1, not_found, MHD_RESPMEM_PERSISTENT);
  enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_NOT_FOUND, r);
  MHD_destroy_response(r);
  return ok;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig, stop = 1;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[2], "epoll") != 0 && strcmp(argv[2], "pool") != 0)) {
    fprintf(stderr, "usage: mhd_exporter PAGE_FILE epoll|pool [THREADS]\n");
    return 2;
  }
  char *page, *gz;
  size_t page_size, gz_size;
  if (read_file(argv[1], &page, &page_size) != 0 ||
      gzip_once(page, page_size, &gz, &gz_size) != 0) {
    fprintf(stderr, "mhd_exporter: cannot read or gzip %s\n", argv[1]);
    return 1;
  }
  plain_page = MHD_create_response_from_buffer(page_size, page, MHD_RESPMEM_PERSISTENT);
  gzip_page = MHD_create_response_from_buffer(gz_size, gz, MHD_RESPMEM_PERSISTENT);
  const char* type = "text/plain; version=0.0.4; charset=utf-8";
  MHD_add_response_header(plain_page, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(gzip_page, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(gzip_page, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
  MHD_add_response_header(plain_page, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
  MHD_add_response_header(gzip_page, MHD_HTTP_HEADER_VARY, "Accept-Encoding");

  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  unsigned int threads = argc > 3 ? (unsigned int)atoi(argv[3]) : 2;
  int pool = strcmp(argv[2], "pool") == 0;
  /* The pool size only where a pool is asked for (MHD warns about a size of 0 or 1). */
  struct MHD_OptionItem options[] = {
      {MHD_OPTION_CONNECTION_LIMIT, 1024, NULL},
      {MHD_OPTION_CONNECTION_TIMEOUT, 10, NULL},
      {MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL},
      {pool ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)threads, NULL},
      {MHD_OPTION_END, 0, NULL},
  };
  struct MHD_Daemon* d = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handle, NULL,
      MHD_OPTION_SOCK_ADDR, (struct sockaddr*)&addr, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "mhd_exporter: MHD_start_daemon failed\n");
    return 1;
  }
  printf("port %u\n", (unsigned)MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
  fflush(stdout);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  while (!stop) pause();
  MHD_stop_daemon(d);
  return 0;
}
