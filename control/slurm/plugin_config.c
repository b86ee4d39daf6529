/* The SPANK plugin's arguments and the --detwan-rate value (plugin_config.h). */
#include "control/slurm/plugin_config.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t err_len, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_len, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(err, err_len, format, args);
  va_end(args);
  return -1;
}

/* Copies src into dst[len]; -1 if it does not fit. */
static int copy(char *dst, size_t len, const char *src, size_t src_len) {
  if (src_len >= len) return -1;
  memcpy(dst, src, src_len);
  dst[src_len] = '\0';
  return 0;
}

int detwan_valid_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 64) return 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)name[i];
    if (!isalnum(c) && c != '.' && c != '_' && c != '-') return 0;
  }
  return 1;
}

static int valid_one_url(const char *url, size_t len) {
  const size_t scheme = len >= 8 && strncmp(url, "https://", 8) == 0  ? 8
                        : len >= 7 && strncmp(url, "http://", 7) == 0 ? 7
                                                                      : 0;
  if (scheme == 0 || len <= scheme) return 0;
  for (size_t i = 0; i < len; ++i) {
    if (url[i] == ' ' || url[i] == '\t' || url[i] == '\n' || url[i] == ',') return 0;
  }
  return 1;
}

/* An agent, or its replica set URL1|URL2|... (one scheme for all; docs/slurm.md). */
static int valid_url(const char *url) {
  const int https = strncmp(url, "https://", 8) == 0;
  for (const char *p = url;;) {
    const char *bar = strchr(p, '|');
    const size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (!valid_one_url(p, len) || (strncmp(p, "https://", 8) == 0) != https) return 0;
    if (bar == NULL) return 1;
    p = bar + 1;
  }
}

/* sites=NODE:SITE,NODE:SITE */
static int parse_sites(struct detwan_config *c, const char *value, char *err, size_t err_len) {
  const char *p = value;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    if (colon == NULL) {
      return fail(err, err_len, "sites=%s: '%.*s' is not NODE:SITE", value, (int)len, p);
    }
    if (c->node_count == DETWAN_MAX_NODES) {
      return fail(err, err_len, "sites=: more than %d nodes", DETWAN_MAX_NODES);
    }
    struct detwan_node_site *e = &c->nodes[c->node_count];
    if (copy(e->node, sizeof e->node, p, (size_t)(colon - p)) != 0 ||
        copy(e->site, sizeof e->site, colon + 1, len - (size_t)(colon - p) - 1) != 0 ||
        !detwan_valid_name(e->node) || !detwan_valid_name(e->site)) {
      return fail(err, err_len,
                  "sites=%s: '%.*s': node and site names are [A-Za-z0-9._-]{1,64}", value,
                  (int)len, p);
    }
    if (detwan_site_of(c, e->node) != NULL) {
      return fail(err, err_len, "sites=%s: node '%s' is named twice", value, e->node);
    }
    ++c->node_count;
    p = end ? end + 1 : p + len;
  }
  return 0;
}

/* agents=SITE=URL,SITE=URL */
static int parse_agents(struct detwan_config *c, const char *value, char *err, size_t err_len) {
  const char *p = value;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    if (eq == NULL) {
      return fail(err, err_len, "agents=%s: '%.*s' is not SITE=URL", value, (int)len, p);
    }
    if (c->agent_count == DETWAN_MAX_SITES) {
      return fail(err, err_len, "agents=: more than %d sites", DETWAN_MAX_SITES);
    }
    struct detwan_site_agent *e = &c->agents[c->agent_count];
    if (copy(e->site, sizeof e->site, p, (size_t)(eq - p)) != 0 || !detwan_valid_name(e->site)) {
      return fail(err, err_len, "agents=%s: '%.*s': bad site name", value, (int)len, p);
    }
    if (copy(e->url, sizeof e->url, eq + 1, len - (size_t)(eq - p) - 1) != 0 ||
        !valid_url(e->url)) {
      return fail(err, err_len, "agents=%s: '%.*s': the URL must start with http(s)://", value,
                  (int)len, p);
    }
    ++c->agent_count;
    p = end ? end + 1 : p + len;
  }
  return 0;
}

/* 30s, 10m, 24h, 2d: what detwanctl --duration takes, checked here so a typo fails at load. */
static int valid_duration(const char *text) {
  size_t digits = strspn(text, "0123456789");
  if (digits == 0 || digits > 9) return 0;
  const char *unit = text + digits;
  return strcmp(unit, "s") == 0 || strcmp(unit, "m") == 0 || strcmp(unit, "h") == 0 ||
         strcmp(unit, "d") == 0;
}

/* Whole seconds in [min_s, 600] into *out; 0 on success. */
static int parse_seconds(const char* value, long min_s, int* out) {
  char* end = NULL;
  const long s = strtol(value, &end, 10);
  if (end == value || *end != '\0' || s < min_s || s > 600) return -1;
  *out = (int)s;
  return 0;
}

int detwan_config_parse(struct detwan_config *c, int argc, char **argv, char *err,
                        size_t err_len) {
  memset(c, 0, sizeof *c);
  strcpy(c->duration, "24h");
  c->timeout_s = 30;
  c->conflict_wait_s = 10;
  for (int i = 0; i < argc; ++i) {
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    if (eq == NULL) {
      return fail(err, err_len, "argument '%s': expected KEY=VALUE (detwanctl=, sites=, agent=, "
                  "agents=, duration=, timeout=, conflict_wait=, token_file=, agent_ca=)", arg);
    }
    const size_t key_len = (size_t)(eq - arg);
    const char *value = eq + 1;
#define KEY_IS(k) (key_len == strlen(k) && strncmp(arg, k, key_len) == 0)
    if (KEY_IS("detwanctl")) {
      if (value[0] != '/' || copy(c->detwanctl, sizeof c->detwanctl, value, strlen(value)) != 0) {
        return fail(err, err_len, "detwanctl=%s: must be an absolute path", value);
      }
    } else if (KEY_IS("sites")) {
      if (parse_sites(c, value, err, err_len) != 0) return -1;
    } else if (KEY_IS("agent")) {
      if (!valid_url(value) || copy(c->agent, sizeof c->agent, value, strlen(value)) != 0) {
        return fail(err, err_len, "agent=%s: must be a URL starting with http(s)://, or replicas' URLs "
                    "joined by |", value);
      }
    } else if (KEY_IS("agents")) {
      if (parse_agents(c, value, err, err_len) != 0) return -1;
    } else if (KEY_IS("duration")) {
      if (!valid_duration(value) || copy(c->duration, sizeof c->duration, value,
                                         strlen(value)) != 0) {
        return fail(err, err_len, "duration=%s: expected a whole number of s, m, h or d (24h)",
                    value);
      }
    } else if (KEY_IS("timeout")) {
      if (parse_seconds(value, 1, &c->timeout_s) != 0) {
        return fail(err, err_len, "timeout=%s: seconds in [1, 600]", value);
      }
    } else if (KEY_IS("conflict_wait")) {
      if (parse_seconds(value, 0, &c->conflict_wait_s) != 0) {
        return fail(err, err_len, "conflict_wait=%s: seconds in [0, 600]", value);
      }
    } else if (KEY_IS("token_file")) {
      if (value[0] != '/' ||
          copy(c->token_file, sizeof c->token_file, value, strlen(value)) != 0) {
        return fail(err, err_len, "token_file=%s: must be an absolute path", value);
      }
    } else if (KEY_IS("agent_ca")) {
      if (value[0] != '/' || copy(c->agent_ca, sizeof c->agent_ca, value, strlen(value)) != 0) {
        return fail(err, err_len, "agent_ca=%s: must be an absolute path", value);
      }
    } else {
      return fail(err, err_len, "unknown argument '%.*s' (known: detwanctl, sites, agent, "
                  "agents, duration, timeout, conflict_wait, token_file, agent_ca)", (int)key_len,
                  arg);
    }
#undef KEY_IS
  }
  if (c->detwanctl[0] == '\0') return fail(err, err_len, "detwanctl=PATH is required");
  if (c->node_count == 0) return fail(err, err_len, "sites=NODE:SITE,... is required");
  if (c->agent[0] == '\0') {
    for (size_t i = 0; i < c->node_count; ++i) {
      if (detwan_agent_for(c, c->nodes[i].site)[0] == '\0') {
        return fail(err, err_len, "site '%s' has no agent: give agent=URL or agents=%s=URL",
                    c->nodes[i].site, c->nodes[i].site);
      }
    }
  }
  return 0;
}

const char *detwan_site_of(const struct detwan_config *c, const char *node) {
  for (size_t i = 0; i < c->node_count; ++i) {
    if (strcmp(c->nodes[i].node, node) == 0) return c->nodes[i].site;
  }
  return NULL;
}

const char *detwan_agent_for(const struct detwan_config *c, const char *site) {
  for (size_t i = 0; i < c->agent_count; ++i) {
    if (strcmp(c->agents[i].site, site) == 0) return c->agents[i].url;
  }
  return c->agent;
}

int detwan_parse_rate(const char *text, uint64_t *rate_bps, char *err, size_t err_len) {
  const char *p = text;
  uint64_t whole = 0;
  if (!isdigit((unsigned char)*p)) {
    return fail(err, err_len, "--detwan-rate=%s: expected a rate such as 50mbit", text);
  }
  while (isdigit((unsigned char)*p)) {
    if (whole > UINT64_MAX / 10 - 1) return fail(err, err_len, "--detwan-rate=%s: too large", text);
    whole = whole * 10 + (uint64_t)(*p++ - '0');
  }
  uint64_t frac = 0, frac_scale = 1;
  if (*p == '.') {
    ++p;
    if (!isdigit((unsigned char)*p)) {
      return fail(err, err_len, "--detwan-rate=%s: expected digits after '.'", text);
    }
    while (isdigit((unsigned char)*p)) {
      if (frac_scale >= 1000000000000ULL) {
        return fail(err, err_len, "--detwan-rate=%s: too many decimals", text);
      }
      frac = frac * 10 + (uint64_t)(*p++ - '0');
      frac_scale *= 10;
    }
  }
  uint64_t multiplier = 1;
  switch (tolower((unsigned char)*p)) {
    case 'k': multiplier = 1000ULL; ++p; break;
    case 'm': multiplier = 1000000ULL; ++p; break;
    case 'g': multiplier = 1000000000ULL; ++p; break;
    case 't': multiplier = 1000000000000ULL; ++p; break;
    default: break;
  }
  if (strcasecmp(p, "bit") != 0 && strcasecmp(p, "bits") != 0 && strcasecmp(p, "bps") != 0) {
    return fail(err, err_len,
                "--detwan-rate=%s: unknown rate unit '%s' (use bit, kbit, mbit, gbit, tbit)", text,
                p);
  }
  if (whole > UINT64_MAX / multiplier) {
    return fail(err, err_len, "--detwan-rate=%s: too large", text);
  }
  /* frac < frac_scale <= 1e12 and multiplier <= 1e12: frac * (multiplier / scale) stays exact
   * for the units above; smaller fractions of a bit are dropped. */
  const uint64_t fractional = multiplier >= frac_scale ? frac * (multiplier / frac_scale)
                                                       : frac / (frac_scale / multiplier);
  const uint64_t bps = whole * multiplier + fractional;
  if (bps < 1000) {
    return fail(err, err_len, "--detwan-rate=%s: at least 1kbit (the agent's minimum)", text);
  }
  *rate_bps = bps;
  return 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

int detwan_job_sites(const struct detwan_config *c, const char *const *nodes, size_t count,
                     char sites[][DETWAN_NAME_MAX], size_t max_sites, char *err,
                     size_t err_len) {
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    const char *site = detwan_site_of(c, nodes[i]);
    if (site == NULL) {
      return fail(err, err_len,
                  "node '%s' has no detwan site (plugstack.conf sites= names %zu nodes)", nodes[i],
                  c->node_count);
    }
    size_t j = 0;
    while (j < n && strcmp(sites[j], site) != 0) ++j;
    if (j < n) continue;
    if (n == max_sites) {
      return fail(err, err_len, "the job spans more than %zu sites", max_sites);
    }
    strcpy(sites[n++], site);
  }
  qsort(sites, n, DETWAN_NAME_MAX, compare_names);
  return (int)n;
}

void detwan_request_id(char *out, size_t len, uint32_t job_id, const char *site_a,
                       const char *site_b) {
  snprintf(out, len, "slurm-%u-%s-%s", job_id, site_a, site_b);
}
