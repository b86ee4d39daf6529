/* detwanctl as a child process, and small readers of its JSON (ctl_exec.h). */
#include "control/slurm/ctl_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
  kMaxArgs = 40,
  kMaxOutBytes = 16 << 20, /* a list of many reservations; more is refused, not truncated */
  kGraceS = 5,             /* beyond detwanctl's own --timeout */
};

static int64_t monotonic_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The bearer token: the first line of token_file, "" without one; -1 if unreadable. */
static int read_token(const char *path, char *token, size_t len, char *err, size_t err_len) {
  token[0] = '\0';
  if (path[0] == '\0') return 0;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, err_len, "token_file %s: %s", path, strerror(errno));
    return -1;
  }
  if (fgets(token, (int)len, f) == NULL) token[0] = '\0';
  fclose(f);
  token[strcspn(token, "\r\n")] = '\0';
  return 0;
}

/* Appends what is readable on fd to *buf; 0 at EOF, 1 if more may come, -1 on overflow. */
static int drain(int fd, char **buf, size_t *len, size_t *cap, size_t limit) {
  char chunk[8192];
  const ssize_t n = read(fd, chunk, sizeof chunk);
  if (n == 0) return 0;
  if (n < 0) return errno == EINTR || errno == EAGAIN ? 1 : 0;
  if (*len + (size_t)n + 1 > limit) return -1;
  if (*len + (size_t)n + 1 > *cap) {
    size_t grown = *cap ? *cap * 2 : 16384;
    while (grown < *len + (size_t)n + 1) grown *= 2;
    char *next = realloc(*buf, grown);
    if (next == NULL) return -1;
    *buf = next;
    *cap = grown;
  }
  memcpy(*buf + *len, chunk, (size_t)n);
  *len += (size_t)n;
  (*buf)[*len] = '\0';
  return 1;
}

int detwan_ctl_run(const struct detwan_config *c, const char *agent_url,
                   const char *const *args, struct detwan_ctl_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_status = -1;
  char token[512];
  if (read_token(c->token_file, token, sizeof token, r->err, sizeof r->err) != 0) return -1;
  char timeout_ms[16];
  snprintf(timeout_ms, sizeof timeout_ms, "%d", c->timeout_s * 1000);
  const char *argv[kMaxArgs];
  size_t argc = 0;
  argv[argc++] = c->detwanctl;
  /* A replica set is written URL1|URL2 in plugstack.conf (',' separates its lists); detwanctl
     takes URL1,URL2 and retries across them. */
  char agents[DETWAN_URL_MAX];
  snprintf(agents, sizeof agents, "%s", agent_url);
  for (char *bar = strchr(agents, '|'); bar != NULL; bar = strchr(bar + 1, '|')) *bar = ',';
  argv[argc++] = "--agent";
  argv[argc++] = agents;
  argv[argc++] = "--json";
  argv[argc++] = "--timeout";
  argv[argc++] = timeout_ms;
  /* The CA of an https agent (detwanctl refuses --ca with an http one). */
  if (c->agent_ca[0] != '\0' && strncmp(agent_url, "https://", 8) == 0) {
    argv[argc++] = "--ca";
    argv[argc++] = c->agent_ca;
  }
  for (size_t i = 0; args[i] != NULL; ++i) {
    if (argc == kMaxArgs - 1) {
      snprintf(r->err, sizeof r->err, "too many detwanctl arguments");
      return -1;
    }
    argv[argc++] = args[i];
  }
  argv[argc] = NULL;
  char token_env[600];
  snprintf(token_env, sizeof token_env, "DETWAN_AGENT_TOKEN=%s", token);
  const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C",
                        token[0] ? token_env : NULL, NULL};

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    snprintf(r->err, sizeof r->err, "pipe: %s", strerror(errno));
    return -1;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    snprintf(r->err, sizeof r->err, "pipe: %s", strerror(errno));
    close(out_pipe[0]);
    close(out_pipe[1]);
    return -1;
  }
  const int64_t deadline = monotonic_ms() + (int64_t)(c->timeout_s + kGraceS) * 1000;
  const pid_t pid = fork();
  if (pid < 0) {
    snprintf(r->err, sizeof r->err, "fork: %s", strerror(errno));
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    return -1;
  }
  if (pid == 0) {
    /* Child: async-signal-safe calls only (the parent may have threads). */
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execve(argv[0], (char *const *)argv, (char *const *)envp);
    static const char kMessage[] = "cannot execute detwanctl\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  char *err_buf = NULL;
  size_t out_len = 0, out_cap = 0, err_len = 0, err_cap = 0;
  int out_open = 1, err_open = 1, killed = 0, overflow = 0;
  while (out_open || err_open) {
    const int64_t left = deadline - monotonic_ms();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
    struct pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                            {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    const int ready = poll(fds, 2, (int)(left > 1000 ? 1000 : left));
    if (ready < 0 && errno != EINTR) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const int more = drain(out_pipe[0], &r->out, &out_len, &out_cap, kMaxOutBytes);
      if (more < 0) overflow = 1;
      out_open = more > 0;
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      const int more = drain(err_pipe[0], &err_buf, &err_len, &err_cap, 64 * 1024);
      err_open = more > 0;
    }
    if (overflow) {
      kill(pid, SIGKILL);
      break;
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (err_buf != NULL) {
    err_buf[strcspn(err_buf, "\n")] = '\0'; /* its first line names the problem */
    snprintf(r->err, sizeof r->err, "%s", err_buf);
    free(err_buf);
  }
  if (killed) {
    snprintf(r->err, sizeof r->err, "detwanctl did not finish within %d s (agent %s)",
             c->timeout_s + kGraceS, agent_url);
  } else if (overflow) {
    snprintf(r->err, sizeof r->err, "detwanctl printed more than %d bytes", kMaxOutBytes);
  } else if (WIFEXITED(status)) {
    r->exit_status = WEXITSTATUS(status);
    if (r->exit_status == 127 && r->out == NULL) {
      snprintf(r->err, sizeof r->err, "cannot execute %s (plugstack.conf detwanctl=)",
               c->detwanctl);
      r->exit_status = -1;
    }
  } else {
    snprintf(r->err, sizeof r->err, "detwanctl ended by signal %d", WTERMSIG(status));
  }
  return r->exit_status;
}

void detwan_ctl_result_free(struct detwan_ctl_result *r) {
  free(r->out);
  r->out = NULL;
}

/* Position just after "key": (the value's first byte), or NULL. */
static const char *after_key(const char *json, const char *key) {
  char pattern[96];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *p = strstr(json, pattern);
  return p ? p + strlen(pattern) : NULL;
}

/* Copies the JSON string starting at p (its opening quote) into out, unescaped. */
static int read_string(const char *p, char *out, size_t out_len) {
  if (*p != '"' || out_len == 0) return -1;
  size_t n = 0;
  for (++p; *p != '\0' && *p != '"'; ++p) {
    char ch = *p;
    if (ch == '\\') {
      ++p;
      switch (*p) {
        case 'n': ch = ' '; break;
        case 't': ch = ' '; break;
        case 'u':
          ch = '?'; /* non-ASCII in a message: shown as '?' */
          for (int i = 0; i < 4 && p[1] != '\0'; ++i) ++p;
          break;
        case '\0': return -1;
        default: ch = *p; break; /* \" \\ \/ */
      }
    }
    if (n + 1 < out_len) out[n++] = ch;
  }
  out[n] = '\0';
  return *p == '"' ? 0 : -1;
}

int detwan_json_string(const char *json, const char *key, char *out, size_t out_len) {
  const char *p = json ? after_key(json, key) : NULL;
  return p ? read_string(p, out, out_len) : -1;
}

int detwan_json_bool(const char *json, const char *key, int *value) {
  const char *p = json ? after_key(json, key) : NULL;
  if (p == NULL) return -1;
  if (strncmp(p, "true", 4) == 0) *value = 1;
  else if (strncmp(p, "false", 5) == 0) *value = 0;
  else return -1;
  return 0;
}

int detwan_json_next_request(const char *json, const char *prefix, const char **cursor,
                             char *id, size_t id_len, char *state, size_t state_len) {
  if (json == NULL) return -1;
  char pattern[256];
  snprintf(pattern, sizeof pattern, "\"client_request_id\":\"%s", prefix);
  const char *match = strstr(*cursor ? *cursor : json, pattern);
  if (match == NULL) return -1;
  *cursor = match + strlen(pattern);
  /* A reservation object begins {"id":"r-N","version":V,"client_request_id":...}. */
  static const char kStart[] = "{\"id\":\"";
  const char *start = match;
  while (start > json && strncmp(start, kStart, sizeof kStart - 1) != 0) --start;
  if (strncmp(start, kStart, sizeof kStart - 1) != 0 ||
      read_string(start + sizeof kStart - 2, id, id_len) != 0) {
    return -1;
  }
  return detwan_json_string(match, "state", state, state_len);
}

int detwan_json_find_request(const char *json, const char *request_id, char *id, size_t id_len,
                             char *state, size_t state_len) {
  char exact[256];
  snprintf(exact, sizeof exact, "%s\"", request_id);
  const char *cursor = NULL;
  return detwan_json_next_request(json, exact, &cursor, id, id_len, state, state_len);
}

void detwan_ctl_describe_error(const struct detwan_ctl_result *r, char *out, size_t out_len) {
  char code[64], message[768];
  if (r->out != NULL && detwan_json_string(r->out, "code", code, sizeof code) == 0 &&
      detwan_json_string(r->out, "message", message, sizeof message) == 0) {
    snprintf(out, out_len, "%s: %s", code, message);
  } else if (r->err[0] != '\0') {
    snprintf(out, out_len, "%s", r->err);
  } else {
    snprintf(out, out_len, "detwanctl exited with status %d and no message", r->exit_status);
  }
}
