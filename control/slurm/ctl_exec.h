/* Running detwanctl from the SPANK plugin, and reading its JSON answers.
 *
 * The plugin talks to the agent only through detwanctl (one client implementation: URL and
 * token handling, units, exit statuses), always with --json: stdout is then the agent's JSON,
 * an error object included, and the exit status says 0 done, 1 refused or failed, 2 bad request
 * (docs/control.md). Calls block the calling Slurm process for at most timeout_s + 5 s; the
 * child is killed after that. Safe in slurmstepd, which has threads: everything the child needs
 * is built before fork(), which only dup2()s and execve()s.
 */
#pragma once

#include <stddef.h>

#include "control/slurm/plugin_config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct detwan_ctl_result {
  int exit_status;          /* detwanctl's; -1 if it could not run or was killed */
  char *out;                /* its stdout (NUL-terminated, malloc'd; NULL if none) */
  char err[DETWAN_ERR_MAX]; /* its stderr, or why it could not run */
};

/* detwanctl --agent URL --json --timeout MS ARGS... ; returns result->exit_status. */
int detwan_ctl_run(const struct detwan_config *config, const char *agent_url,
                   const char *const *args, struct detwan_ctl_result *result);

void detwan_ctl_result_free(struct detwan_ctl_result *result);

/* The string value of the first "key":"..." at or after `from` (unescaped, truncated to out_len),
 * or -1. The agent serialises objects compactly in a fixed key order, so the first "state" of a
 * reservation is its own and an error's "message" is its own. */
int detwan_json_string(const char *json, const char *key, char *out, size_t out_len);

/* The boolean value of the first "key":true|false, or -1. */
int detwan_json_bool(const char *json, const char *key, int *value);

/* In a list answer ({"reservations":[...]}), the id and state of the reservation made with
 * client_request_id `request_id`; -1 if there is none. */
int detwan_json_find_request(const char *list_json, const char *request_id, char *id,
                             size_t id_len, char *state, size_t state_len);

/* Iterates over the reservations whose client_request_id starts with `prefix`: start with
 * *cursor = NULL; each call fills id and state of the next one and returns 0, -1 at the end. */
int detwan_json_next_request(const char *list_json, const char *prefix, const char **cursor,
                             char *id, size_t id_len, char *state, size_t state_len);

/* "CODE: MESSAGE" of an error answer, else detwanctl's stderr, else what happened to it. */
void detwan_ctl_describe_error(const struct detwan_ctl_result *result, char *out,
                               size_t out_len);

#ifdef __cplusplus
}
#endif
