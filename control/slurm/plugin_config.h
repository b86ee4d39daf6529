/* The detwan SPANK plugin's configuration: the arguments of its plugstack.conf line, the map
 * from Slurm node names to detwan sites, and the --detwan-rate value (docs/slurm.md).
 *
 *   required spank_detwan.so detwanctl=PATH sites=NODE:SITE[,NODE:SITE...]
 *            [agent=URL] [agents=SITE=URL[,SITE=URL...]] [duration=24h] [timeout=30]
 *            [conflict_wait=10] [token_file=PATH] [agent_ca=PATH]
 *
 * token_file: its first line is the bearer token, given to detwanctl in its environment (never on
 * its command line). agent_ca: the CA of https:// agents, given to detwanctl as --ca (and to the
 * job as DETWAN_AGENT_CA); URLs may be http:// or https:// (docs/trust.md).
 *
 * Pure functions on caller-owned memory: no Slurm calls, no allocation, no global state, so the
 * unit tests (tests/control/slurm_plugin_config_test.cc) run them without Slurm. Every failure
 * writes a message naming the argument into `err` and returns -1.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DETWAN_NAME_MAX = 65,   /* site and node names: [A-Za-z0-9._-]{1,64} + NUL */
  DETWAN_URL_MAX = 256,
  DETWAN_PATH_MAX = 1024,
  DETWAN_MAX_NODES = 256, /* entries of sites= */
  DETWAN_MAX_SITES = 16,  /* entries of agents=, and distinct sites of one job */
  DETWAN_ERR_MAX = 1024,
  DETWAN_RATE_TEXT_MAX = 32,
};

struct detwan_node_site {
  char node[DETWAN_NAME_MAX];
  char site[DETWAN_NAME_MAX];
};

struct detwan_site_agent {
  char site[DETWAN_NAME_MAX];
  char url[DETWAN_URL_MAX];
};

struct detwan_config {
  char detwanctl[DETWAN_PATH_MAX];  /* the detwanctl binary (absolute path) */
  char agent[DETWAN_URL_MAX];       /* agent URL for sites without their own in agents= */
  struct detwan_node_site nodes[DETWAN_MAX_NODES];
  size_t node_count;
  struct detwan_site_agent agents[DETWAN_MAX_SITES];
  size_t agent_count;
  char duration[32];                /* the reservation's length, detwanctl --duration */
  char token_file[DETWAN_PATH_MAX]; /* optional: first line = bearer token */
  char agent_ca[DETWAN_PATH_MAX];   /* optional: CA file of https agents (detwanctl --ca) */
  int timeout_s;                    /* per detwanctl call */
  int conflict_wait_s;              /* how long a prefix_conflict is retried */
};

/* Parses the plugstack.conf arguments; unknown arguments are errors. */
int detwan_config_parse(struct detwan_config *config, int argc, char **argv, char *err,
                        size_t err_len);

/* The site of a Slurm node, NULL if sites= does not name it. */
const char *detwan_site_of(const struct detwan_config *config, const char *node);

/* The agent URL for a site's nodes (agents=, else agent=). Never NULL (may be ""). */
const char *detwan_agent_for(const struct detwan_config *config, const char *site);

/* "50mbit", "1.5gbit", "800kbit", "2000000bit" (also bits, bps) -> bit/s, at least 1000 (the
 * agent's minimum). */
int detwan_parse_rate(const char *text, uint64_t *rate_bps, char *err, size_t err_len);

/* [A-Za-z0-9._-]{1,64} */
int detwan_valid_name(const char *name);

/* The distinct sites of `nodes` (count entries) in name order, so every node and step of a job
 * forms the same pairs. Fails naming a node without a site. Returns the number of sites. */
int detwan_job_sites(const struct detwan_config *config, const char *const *nodes, size_t count,
                     char sites[][DETWAN_NAME_MAX], size_t max_sites, char *err, size_t err_len);

/* The idempotency key of a job's reservation between two sites: "slurm-JOBID-A-B". */
void detwan_request_id(char *out, size_t len, uint32_t job_id, const char *site_a,
                       const char *site_b);

#ifdef __cplusplus
}
#endif
