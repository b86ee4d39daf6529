/* spank_detwan: Slurm jobs reserve their WAN path through detwan-agent (docs/slurm.md).
 *
 *   srun|sbatch|salloc --detwan-rate=50mbit ...
 *
 * Which Slurm context does what, and why there:
 *   local/allocator (srun, sbatch, salloc): --detwan-rate is checked at once, so a typo never
 *       reaches the queue. Slurm hands the value to every other context.
 *   remote (slurmstepd, each node, each step), init_post_opt: still root, before any task is
 *       forked. The job's nodes (SLURM_JOB_NODELIST) map to sites (sites=); for each pair of
 *       sites `detwanctl reserve --provision --request-id slurm-JOB-A-B`: the first node's call
 *       reserves and provisions, every other node and later step gets the same reservation back
 *       (idempotent) once its tunnel is active. A refusal is remembered, never returned here: a
 *       failing remote context of a batch job drains the node ("batch job complete failure").
 *   remote, user_init: DETWAN_SITE, DETWAN_AGENT and DETWAN_RESERVATION into the tasks' env.
 *   remote, task_init (in each task, stdio already the task's): a refused job prints the agent's
 *       reason on the task's stderr and the task exits 1 before exec; nothing is held.
 *   job_script (slurmd, epilog of every node, whatever ended the job: completion, failure,
 *       scancel, time limit): the job's reservations, found by request id in `detwanctl list`,
 *       are terminated. Always returns 0: a failing epilog drains the node.
 *   local, exit (an srun that made its own allocation, so the job ends with it): the same,
 *       through agent=, before srun returns; the epilog a moment later finds nothing left.
 * The plugin never fails a context with an error return except for a bad --detwan-rate or a bad
 * plugstack.conf line: both should stop everything loudly.
 */
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/slurm/ctl_exec.h"
#include "control/slurm/plugin_config.h"

SPANK_PLUGIN(detwan, 1)

enum { kNodeListMax = 8192, kIdsMax = 512, kMaxPairs = DETWAN_MAX_SITES * (DETWAN_MAX_SITES - 1) / 2 };

/* Everything this plugin knows in one Slurm process (srun, a slurmstepd, an epilog). */
struct plugin_state {
  struct detwan_config config;
  int config_ok;
  int rate_given;
  uint64_t rate_bps;
  char site[DETWAN_NAME_MAX];         /* this node's site ("" unknown) */
  const char *agent_url;              /* the agent for this node's site */
  char reservations[kIdsMax];         /* "r-3" or "r-3,r-4" */
  int own_allocation;                 /* srun, not inside sbatch/salloc */
  uint32_t job_id;                    /* srun: its job, once allocated */
  char refusal[2 * DETWAN_ERR_MAX];   /* non-empty: the job may not run */
};

static struct plugin_state state;

static int rate_option_cb(int val, const char *optarg, int remote);

static struct spank_option rate_option = {
    "detwan-rate", "RATE",
    "reserve RATE (e.g. 50mbit) in each direction between the job's sites through detwan-agent "
    "before its tasks start; released when the job ends (docs/slurm.md)",
    1, 0, rate_option_cb};

static int rate_option_cb(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  char err[DETWAN_ERR_MAX];
  if (optarg == NULL || detwan_parse_rate(optarg, &state.rate_bps, err, sizeof err) != 0) {
    slurm_error("detwan: %s", optarg ? err : "--detwan-rate needs a value, e.g. 50mbit");
    return -1;
  }
  state.rate_given = 1;
  return 0;
}

/* The plugstack.conf arguments: slurm_spank_init parses them, except in the job script context
 * (prolog/epilog), where Slurm calls no init and hands them to the callback itself. */
static int load_config(int ac, char **av) {
  if (state.config_ok) return 0;
  char err[DETWAN_ERR_MAX];
  if (detwan_config_parse(&state.config, ac, av, err, sizeof err) != 0) {
    slurm_error("detwan: plugstack.conf: %s", err);
    return -1;
  }
  state.config_ok = 1;
  return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
  if (load_config(ac, av) != 0) return -1;
  const spank_context_t context = spank_context();
  state.own_allocation = context == S_CTX_LOCAL && getenv("SLURM_JOB_ID") == NULL;
  if (context == S_CTX_LOCAL || context == S_CTX_REMOTE || context == S_CTX_ALLOCATOR) {
    if (spank_option_register(sp, &rate_option) != ESPANK_SUCCESS) {
      slurm_error("detwan: cannot register --detwan-rate");
      return -1;
    }
  }
  return 0;
}

/* Expands a Slurm hostlist ("site-[a-b],x1") into nodes[]; returns the count or -1. */
static int expand_nodes(const char *hostlist, char nodes[][DETWAN_NAME_MAX], size_t max,
                        char *err, size_t err_len) {
  hostlist_t list = slurm_hostlist_create(hostlist);
  if (list == NULL) {
    snprintf(err, err_len, "cannot parse the node list '%s'", hostlist);
    return -1;
  }
  size_t n = 0;
  char *host;
  int rc = 0;
  while ((host = slurm_hostlist_shift(list)) != NULL) {
    if (n == max || strlen(host) >= DETWAN_NAME_MAX) {
      snprintf(err, err_len, "node list '%s': more than %zu nodes or a name over 64 bytes",
               hostlist, max);
      rc = -1;
    } else {
      strcpy(nodes[n++], host);
    }
    free(host);
  }
  slurm_hostlist_destroy(list);
  return rc == 0 ? (int)n : -1;
}

static char job_nodes[DETWAN_MAX_NODES][DETWAN_NAME_MAX];
static char job_sites[DETWAN_MAX_SITES][DETWAN_NAME_MAX];

/* The distinct sites of a node list, sorted; -1 with err set. */
static int sites_of(const char *hostlist, char *err, size_t err_len) {
  const int n = expand_nodes(hostlist, job_nodes, DETWAN_MAX_NODES, err, err_len);
  if (n < 0) return -1;
  const char *names[DETWAN_MAX_NODES];
  for (int i = 0; i < n; ++i) names[i] = job_nodes[i];
  return detwan_job_sites(&state.config, names, (size_t)n, job_sites, DETWAN_MAX_SITES, err,
                          err_len);
}

/* One reserve call for a <-> b; fills id or the reason (and the agent's error code). 0 when
 * the reservation is provisioned and its tunnel active. */
static int reserve_once(const char *a, const char *b, const char *request_id, char *id,
                        size_t id_len, char *reason, size_t reason_len, char *code,
                        size_t code_len) {
  char rate[40];
  snprintf(rate, sizeof rate, "%llubit", (unsigned long long)state.rate_bps);
  const char *args[] = {"reserve", "--from", a, "--to", b, "--rate", rate,
                        "--duration", state.config.duration, "--provision",
                        "--request-id", request_id, NULL};
  struct detwan_ctl_result r;
  const int status = detwan_ctl_run(&state.config, state.agent_url, args, &r);
  char got_state[32] = "";
  int active = 0;
  int rc = -1;
  code[0] = '\0';
  if (status == 0 && detwan_json_string(r.out, "id", id, id_len) == 0 &&
      detwan_json_string(r.out, "state", got_state, sizeof got_state) == 0) {
    const char *dataplane = strstr(r.out, "\"dataplane\":");
    if (strcmp(got_state, "provisioned") == 0 && dataplane != NULL &&
        detwan_json_bool(dataplane, "active", &active) == 0 && active) {
      rc = 0;
    } else {
      snprintf(reason, reason_len, "reservation %s (%s) is %s%s", id, request_id, got_state,
               strcmp(got_state, "provisioned") == 0 ? " but its tunnel is not active" : "");
    }
  } else {
    char what[DETWAN_ERR_MAX];
    detwan_ctl_describe_error(&r, what, sizeof what);
    snprintf(reason, reason_len, "%s", what);
    if (r.out != NULL && detwan_json_string(r.out, "code", code, code_len) != 0) code[0] = '\0';
  }
  detwan_ctl_result_free(&r);
  return rc;
}

/* Reserves and provisions a <-> b for the job. A prefix_conflict is retried for up to
 * conflict_wait= seconds: it is what a previous job between the same sites leaves while its
 * epilog has not yet terminated its reservation (a moment after the job ended). */
static int reserve_pair(uint32_t job_id, const char *a, const char *b, char *id, size_t id_len,
                        char *reason, size_t reason_len) {
  char request_id[200], code[64];
  detwan_request_id(request_id, sizeof request_id, job_id, a, b);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (reserve_once(a, b, request_id, id, id_len, reason, reason_len, code, sizeof code) == 0) {
      return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (strcmp(code, "prefix_conflict") != 0 ||
        now.tv_sec - start.tv_sec >= state.config.conflict_wait_s) {
      return -1;
    }
    const struct timespec pause = {0, 250 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

static void terminate_id(const char *id) {
  const char *args[] = {"terminate", id, NULL};
  struct detwan_ctl_result r;
  if (detwan_ctl_run(&state.config, state.agent_url, args, &r) != 0) {
    char what[DETWAN_ERR_MAX];
    detwan_ctl_describe_error(&r, what, sizeof what);
    slurm_error("detwan: terminate %s failed: %s", id, what);
  } else if (spank_context() == S_CTX_LOCAL) {
    slurm_verbose("detwan: terminated %s", id); /* srun -v shows it */
  } else {
    slurm_info("detwan: terminated %s", id);
  }
  detwan_ctl_result_free(&r);
}

static void refuse(uint32_t job_id, const char *format, const char *detail) {
  char text[DETWAN_ERR_MAX];
  snprintf(text, sizeof text, format, detail);
  snprintf(state.refusal, sizeof state.refusal,
           "detwan: job %u refused, nothing reserved: %s", job_id, text);
  slurm_error("%s", state.refusal); /* the slurmd log; the task's stderr gets it in task_init */
}

/* Reserves every pair of the job's sites; on the first refusal terminates what it made. */
static void reserve_job(uint32_t job_id, int site_count) {
  char ids[kMaxPairs][64];
  int made = 0;
  state.reservations[0] = '\0';
  for (int i = 0; i < site_count; ++i) {
    for (int j = i + 1; j < site_count; ++j) {
      char reason[DETWAN_ERR_MAX], what[DETWAN_ERR_MAX + 200];
      if (reserve_pair(job_id, job_sites[i], job_sites[j], ids[made], sizeof ids[made], reason,
                       sizeof reason) != 0) {
        snprintf(what, sizeof what, "%s <-> %s at %llubit from agent %s: %s", job_sites[i],
                 job_sites[j], (unsigned long long)state.rate_bps, state.agent_url, reason);
        for (int k = 0; k < made; ++k) terminate_id(ids[k]);
        state.reservations[0] = '\0';
        refuse(job_id, "%s", what);
        return;
      }
      const size_t used = strlen(state.reservations);
      snprintf(state.reservations + used, sizeof state.reservations - used, "%s%s",
               used ? "," : "", ids[made]);
      ++made;
    }
  }
  slurm_info("detwan: job %u rides %s (sites %d, agent %s)", job_id, state.reservations,
             site_count, state.agent_url);
}

static void job_env(spank_t sp, const char *name, char *out, size_t len) {
  out[0] = '\0';
  if (spank_getenv(sp, name, out, (int)len) != ESPANK_SUCCESS) out[0] = '\0';
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (spank_context() != S_CTX_REMOTE || !state.config_ok) return 0;
  uint32_t job_id = 0, node_id = 0;
  spank_get_item(sp, S_JOB_ID, &job_id);
  spank_get_item(sp, S_JOB_NODEID, &node_id);
  static char job_list[kNodeListMax], step_list[kNodeListMax];
  job_env(sp, "SLURM_JOB_NODELIST", job_list, sizeof job_list);
  if (job_list[0] == '\0') job_env(sp, "SLURM_NODELIST", job_list, sizeof job_list);
  job_env(sp, "SLURM_STEP_NODELIST", step_list, sizeof step_list);
  if (step_list[0] == '\0') strcpy(step_list, job_list); /* the batch step: node 0 of the job */
  char err[DETWAN_ERR_MAX];
  static char step_nodes[DETWAN_MAX_NODES][DETWAN_NAME_MAX];
  const int step_count = expand_nodes(step_list, step_nodes, DETWAN_MAX_NODES, err, sizeof err);
  const char *site = step_count > (int)node_id ? detwan_site_of(&state.config,
                                                                step_nodes[node_id]) : NULL;
  snprintf(state.site, sizeof state.site, "%s", site ? site : "");
  state.agent_url = detwan_agent_for(&state.config, state.site);
  if (!state.rate_given) return 0;
  if (site == NULL) {
    refuse(job_id, "%s", step_count < 0 ? err : "this node has no detwan site (plugstack.conf "
                                                "sites=)");
    return 0;
  }
  const int sites = sites_of(job_list, err, sizeof err);
  if (sites < 0) {
    refuse(job_id, "%s", err);
  } else if (sites >= 2) {
    reserve_job(job_id, sites);
  } else {
    slurm_info("detwan: job %u runs at site %s only: no WAN reservation", job_id, state.site);
  }
  return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (!state.config_ok || state.site[0] == '\0') return 0;
  spank_setenv(sp, "DETWAN_SITE", state.site, 1);
  if (state.reservations[0] != '\0') {
    /* A replica set (URL1|URL2) as the collectives read it: URL1,URL2. */
    char agents[DETWAN_URL_MAX];
    snprintf(agents, sizeof agents, "%s", state.agent_url);
    for (char *bar = strchr(agents, '|'); bar != NULL; bar = strchr(bar + 1, '|')) *bar = ',';
    spank_setenv(sp, "DETWAN_AGENT", agents, 1);
    if (state.config.agent_ca[0] != '\0' && strncmp(state.agent_url, "https://", 8) == 0) {
      spank_setenv(sp, "DETWAN_AGENT_CA", state.config.agent_ca, 1);
    }
    spank_setenv(sp, "DETWAN_RESERVATION", state.reservations, 1);
  }
  return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  (void)sp;
  (void)ac;
  (void)av;
  if (state.refusal[0] == '\0') return 0;
  fprintf(stderr, "%s\n", state.refusal);
  fflush(stderr);
  return -1; /* slurmstepd ends the task with status 1 before exec */
}

/* Terminates what is still booked of the job's reservations (request ids slurm-JOB-*). */
static void terminate_job(uint32_t job_id, const char *where) {
  const char *args[] = {"list", NULL};
  struct detwan_ctl_result r;
  if (detwan_ctl_run(&state.config, state.agent_url, args, &r) != 0) {
    char err[DETWAN_ERR_MAX];
    detwan_ctl_describe_error(&r, err, sizeof err);
    slurm_error("detwan: %s of job %u: cannot list the agent's reservations (%s); they end at "
                "their end time (duration=%s)", where, job_id, err, state.config.duration);
    detwan_ctl_result_free(&r);
    return;
  }
  char prefix[64], id[64], got_state[32];
  snprintf(prefix, sizeof prefix, "slurm-%u-", job_id);
  const char *cursor = NULL;
  while (detwan_json_next_request(r.out, prefix, &cursor, id, sizeof id, got_state,
                                  sizeof got_state) == 0) {
    if (strcmp(got_state, "terminated") != 0 && strcmp(got_state, "failed") != 0) {
      terminate_id(id);
    }
  }
  detwan_ctl_result_free(&r);
}

/* srun that made its own allocation: the job ends with this srun, so its reservations are
 * terminated before srun returns (the epilog, a moment later, finds them terminated). */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  spank_get_item(sp, S_JOB_ID, &state.job_id);
  return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av) {
  (void)sp;
  (void)ac;
  (void)av;
  if (spank_context() != S_CTX_LOCAL || !state.config_ok || !state.rate_given ||
      !state.own_allocation || state.job_id == 0 || state.config.agent[0] == '\0') {
    return 0;
  }
  state.agent_url = state.config.agent;
  terminate_job(state.job_id, "end of srun");
  return 0;
}

/* Every node's epilog, however the job ended; the first one terminates, the others find the
 * reservations terminated. Always 0: a failing epilog drains the node. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av) {
  char *rate = NULL;
  if (load_config(ac, av) != 0 ||
      spank_option_getopt(sp, &rate_option, &rate) != ESPANK_SUCCESS) {
    return 0;
  }
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
    const char *text = getenv("SLURM_JOB_ID");
    job_id = text ? (uint32_t)strtoul(text, NULL, 10) : 0;
  }
  const char *me = getenv("SLURMD_NODENAME");
  const char *site = me ? detwan_site_of(&state.config, me) : NULL;
  if (job_id == 0 || site == NULL) {
    slurm_error("detwan: epilog of job %u: %s", job_id,
                job_id == 0 ? "no job id" : "this node has no site (plugstack.conf sites=)");
    return 0;
  }
  state.agent_url = detwan_agent_for(&state.config, site);
  terminate_job(job_id, "epilog");
  return 0;
}
