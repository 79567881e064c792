/*
 * Per-request metrics (ingress-nginx's nginx_ingress_controller_requests and
 * its histograms), collected in the log phase into a shared zone that the
 * controller reads through the configuration API (GET /configuration/metrics,
 * lua/ferrule/metrics.lua): no per-request IPC, no Lua on the request path.
 *
 * An entry is one (location labels, canary, method, status). Its counters are
 * split into NGX_HTTP_FERRULE_SLOTS slots, a worker adding to slot
 * ngx_worker % SLOTS, so that workers do not fight over cache lines; a reader
 * sums them. The zone's name carries its layout (bucket bounds, slots, the
 * format of this file's structures): a new layout is a new zone, while a
 * reload with the same one keeps it, and its counts, whatever else changed.
 *
 * The status comes from the backend, so that no location can make series at
 * will: a status IANA registers (or NGINX's own 444, 494-497, 499) is its
 * own, any other is folded into its class ("4xx"; "xxx" from 600 on), which
 * keeps what dashboards read (status=~"5..", status!~"[4-5].*"). Methods are
 * NGINX's or OTHER. Each location (its labels) may then hold entries up to its
 * budget, counted in bytes as the slab allocator takes them (an entry of the
 * default buckets is a whole 4 KiB page): at most a sixteenth of the zone, at
 * most NGX_HTTP_FERRULE_LOC_ENTRIES entries. A series a location has no
 * budget left for is counted in its overflow entry of that status class
 * (canary empty, method OTHER), so that no location can fill the zone and stop
 * the others' new series being counted, and its own totals stay exact.
 *
 * A worker keeps pointers to entries in a table of its own and counts a
 * request with atomic additions alone; so an entry lives as long as some
 * worker may count into it. Each location of a configuration has a record in
 * the zone (its labels, its entries, what they take): every worker holds a
 * reference to the records of its configuration's locations, taken when it
 * starts and given back when it exits, and the master marks the records of the
 * configuration it loads with that configuration's generation. A record no
 * worker holds and the newest configuration does not have (its location left
 * the configuration, and the last old worker is gone) is freed with its
 * entries. A worker that dies without exiting keeps its references: its
 * records stay until NGINX restarts.
 *
 * One slot, in counters (ngx_atomic_t), the histograms in this order, each with
 * its sum (milliseconds, or bytes) then its buckets (non-cumulative, +Inf last):
 *
 *   request time      sum, time buckets + 1
 *   upstream response sum, time buckets + 1   (requests with an upstream only)
 *   upstream connect  sum, time buckets + 1
 *   upstream header   sum, time buckets + 1
 *   request length    sum, length buckets + 1
 *   bytes sent        sum, length buckets + 1 (response size)
 *   bytes sent        size buckets + 1        (bytes_sent, no sum: the one above)
 *
 * The dump (ngx_http_ferrule_metrics_dump) is text, one line per entry after a
 * header; controller/src/scrape.rs reads it and states the format.
 */

#include "ngx_http_ferrule_module.h"


#define NGX_HTTP_FERRULE_SLOTS          4
#define NGX_HTTP_FERRULE_MAX_BUCKETS    64
/* entries a worker remembers; beyond, it looks them up in the zone */
#define NGX_HTTP_FERRULE_CACHE_MAX      65536
/* a location's budget: at most this many entries, at most 1/SHARE of the zone */
#define NGX_HTTP_FERRULE_LOC_ENTRIES    128
#define NGX_HTTP_FERRULE_LOC_SHARE      16
/* the key bytes a budget is reckoned with beside the counters */
#define NGX_HTTP_FERRULE_KEY_RESERVE    128
/* a folded status: a class ("4xx") is this plus its digit, "xxx" is CLASS + 6 */
#define NGX_HTTP_FERRULE_CLASS          1000


typedef struct ngx_http_ferrule_metrics_loc_s  ngx_http_ferrule_metrics_loc_t;


typedef struct {
    ngx_str_node_t                   sn;       /* the key, as the dump prints it */
    ngx_queue_t                      queue;    /* in its location's entries */
    ngx_atomic_t                    *counters; /* SLOTS slots of slot_len */
} ngx_http_ferrule_metrics_node_t;


/* a location (its labels) in the zone: its entries and who may count into them */
struct ngx_http_ferrule_metrics_loc_s {
    ngx_str_node_t                   sn;       /* the labels */
    ngx_queue_t                      entries;
    ngx_uint_t                       refs;     /* workers holding it */
    ngx_uint_t                       generation; /* the newest config with it */
    size_t                           bytes;    /* its entries, as the slab took them */
};


typedef struct {
    ngx_rbtree_t                     rbtree;   /* entries by key */
    ngx_rbtree_node_t                sentinel;
    ngx_rbtree_t                     locs;     /* locations by labels */
    ngx_rbtree_node_t                locs_sentinel;
    ngx_atomic_t                     entries;
    ngx_atomic_t                     dropped;  /* requests no entry had room for */
    ngx_atomic_t                     bound;    /* bytes a dump may need */
    ngx_uint_t                       generation; /* of the newest configuration */
} ngx_http_ferrule_metrics_shctx_t;


/* a worker's pointer to an entry (`status` folded) */
typedef struct {
    void                            *loc;      /* the location's configuration */
    ngx_uint_t                       method;
    ngx_uint_t                       status;
    ngx_str_t                        canary;
    ngx_atomic_t                    *counters;
} ngx_http_ferrule_cached_t;


typedef struct {
    ngx_http_ferrule_cached_t       *slots;
    ngx_uint_t                       size;     /* a power of two */
    ngx_uint_t                       used;
} ngx_http_ferrule_cache_t;


static ngx_http_ferrule_cache_t  ngx_http_ferrule_cache;


/* NGINX's method bits and their names; any other method counts as OTHER */
static struct {
    ngx_uint_t   method;
    ngx_str_t    name;
} ngx_http_ferrule_methods[] = {
    { NGX_HTTP_GET, ngx_string("GET") },
    { NGX_HTTP_HEAD, ngx_string("HEAD") },
    { NGX_HTTP_POST, ngx_string("POST") },
    { NGX_HTTP_PUT, ngx_string("PUT") },
    { NGX_HTTP_DELETE, ngx_string("DELETE") },
    { NGX_HTTP_MKCOL, ngx_string("MKCOL") },
    { NGX_HTTP_COPY, ngx_string("COPY") },
    { NGX_HTTP_MOVE, ngx_string("MOVE") },
    { NGX_HTTP_OPTIONS, ngx_string("OPTIONS") },
    { NGX_HTTP_PROPFIND, ngx_string("PROPFIND") },
    { NGX_HTTP_PROPPATCH, ngx_string("PROPPATCH") },
    { NGX_HTTP_LOCK, ngx_string("LOCK") },
    { NGX_HTTP_UNLOCK, ngx_string("UNLOCK") },
    { NGX_HTTP_PATCH, ngx_string("PATCH") },
    { NGX_HTTP_TRACE, ngx_string("TRACE") },
#ifdef NGX_HTTP_CONNECT
    { NGX_HTTP_CONNECT, ngx_string("CONNECT") },
#endif
    { 0, ngx_string("OTHER") }
};


static ngx_str_t *
ngx_http_ferrule_method_name(ngx_uint_t method)
{
    ngx_uint_t  i;

    for (i = 0; ngx_http_ferrule_methods[i].method; i++) {
        if (ngx_http_ferrule_methods[i].method == method) {
            break;
        }
    }

    return &ngx_http_ferrule_methods[i].name;
}


/* "0.005,0.01,...": increasing bounds */
static char *
ngx_http_ferrule_parse_buckets(ngx_conf_t *cf, ngx_str_t *value,
    ngx_http_ferrule_buckets_t *b)
{
    u_char  *p, *end, *tok, num[64];
    size_t   len;
    double   le;

    b->text = *value;
    b->n = 0;
    b->le = ngx_palloc(cf->pool, NGX_HTTP_FERRULE_MAX_BUCKETS * sizeof(double));
    if (b->le == NULL) {
        return NGX_CONF_ERROR;
    }

    end = value->data + value->len;

    for (p = value->data; p < end; p++) {
        tok = p;
        while (p < end && *p != ',') {
            p++;
        }

        len = p - tok;
        if (len == 0 || len >= sizeof(num) || b->n == NGX_HTTP_FERRULE_MAX_BUCKETS) {
            goto invalid;
        }

        ngx_memcpy(num, tok, len);
        num[len] = '\0';

        if (strspn((char *) num, "0123456789.eE+-") != len) {
            goto invalid;
        }

        le = strtod((char *) num, NULL);
        if (!(le >= 0) || (b->n && le <= b->le[b->n - 1])) {
            goto invalid;
        }

        b->le[b->n++] = le;
    }

    if (b->n == 0) {
        goto invalid;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid buckets \"%V\": increasing numbers, "
                       "comma-separated", value);
    return NGX_CONF_ERROR;
}


/* what the slab allocator takes for `size` bytes (ngx_slab.c's rounding) */
static size_t
ngx_http_ferrule_slab_size(size_t size)
{
    size_t  s;

    if (size > ngx_pagesize / 2) {
        return ngx_align(size, ngx_pagesize);
    }

    for (s = 8; s < size; s <<= 1) { /* void */ }

    return s;
}


static ngx_http_ferrule_metrics_loc_t *
ngx_http_ferrule_metrics_loc_find(ngx_http_ferrule_metrics_shctx_t *sh,
    ngx_str_t *labels)
{
    return (ngx_http_ferrule_metrics_loc_t *) ngx_str_rbtree_lookup(
               &sh->locs, labels, ngx_crc32_short(labels->data, labels->len));
}


/* the record of `labels`, added if missing (NULL: no room); the lock held */
static ngx_http_ferrule_metrics_loc_t *
ngx_http_ferrule_metrics_loc_get(ngx_slab_pool_t *shpool,
    ngx_http_ferrule_metrics_shctx_t *sh, ngx_str_t *labels,
    ngx_uint_t generation)
{
    ngx_http_ferrule_metrics_loc_t  *loc;

    loc = ngx_http_ferrule_metrics_loc_find(sh, labels);
    if (loc) {
        return loc;
    }

    loc = ngx_slab_calloc_locked(shpool, sizeof(*loc) + labels->len);
    if (loc == NULL) {
        return NULL;
    }

    loc->sn.str.len = labels->len;
    loc->sn.str.data = (u_char *) (loc + 1);
    ngx_memcpy(loc->sn.str.data, labels->data, labels->len);
    loc->sn.node.key = ngx_crc32_short(labels->data, labels->len);
    ngx_queue_init(&loc->entries);
    loc->generation = generation;
    ngx_rbtree_insert(&sh->locs, &loc->sn.node);

    return loc;
}


/* frees a record nobody counts into, and its entries; the lock held */
static void
ngx_http_ferrule_metrics_loc_free(ngx_http_ferrule_main_conf_t *fmcf,
    ngx_slab_pool_t *shpool, ngx_http_ferrule_metrics_shctx_t *sh,
    ngx_http_ferrule_metrics_loc_t *loc)
{
    ngx_queue_t                      *q;
    ngx_http_ferrule_metrics_node_t  *node;

    while (!ngx_queue_empty(&loc->entries)) {
        q = ngx_queue_head(&loc->entries);
        ngx_queue_remove(q);
        node = ngx_queue_data(q, ngx_http_ferrule_metrics_node_t, queue);
        ngx_rbtree_delete(&sh->rbtree, &node->sn.node);
        sh->entries--;
        sh->bound -= node->sn.str.len + 2 + fmcf->slot_len * 21;
        /* the allocation starts with the counters */
        ngx_slab_free_locked(shpool, (void *) node->counters);
    }

    ngx_rbtree_delete(&sh->locs, &loc->sn.node);
    ngx_slab_free_locked(shpool, loc);
}


/*
 * In the master, as a configuration is loaded: its locations' records are
 * marked with its generation (added if missing), and those no worker holds
 * and it does not have are freed (a failed reload's, locations whose workers
 * are all gone).
 */
static void
ngx_http_ferrule_metrics_mark(ngx_http_ferrule_main_conf_t *fmcf,
    ngx_slab_pool_t *shpool, ngx_http_ferrule_metrics_shctx_t *sh)
{
    ngx_uint_t                        i;
    ngx_rbtree_node_t                *node, *next;
    ngx_http_ferrule_loc_conf_t     **flcfs;
    ngx_http_ferrule_metrics_loc_t   *loc;

    /*
     * Workers hold the lock for a lookup: a wait this long means a holder
     * died, which the master frees only once it reaps it. Unmarked, the
     * records are still those of the old generation, freed only when no
     * worker holds them: at worst a location's counts start again.
     */
    for (i = 0; !ngx_shmtx_trylock(&shpool->mutex); i++) {
        if (i == NGX_HTTP_FERRULE_LOCK_WAIT) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "ferrule: the metrics zone is locked, its "
                          "locations are not marked");
            fmcf->metrics_generation = sh->generation;
            return;
        }
        ngx_msleep(1);
    }

    fmcf->metrics_generation = ++sh->generation;

    if (fmcf->metrics_locs) {
        flcfs = fmcf->metrics_locs->elts;
        for (i = 0; i < fmcf->metrics_locs->nelts; i++) {
            loc = ngx_http_ferrule_metrics_loc_get(shpool, sh,
                                                   &flcfs[i]->metrics_labels,
                                                   sh->generation);
            if (loc) {
                loc->generation = sh->generation;
            }
        }
    }

    if (sh->locs.root != sh->locs.sentinel) {
        for (node = ngx_rbtree_min(sh->locs.root, sh->locs.sentinel);
             node;
             node = next)
        {
            next = ngx_rbtree_next(&sh->locs, node);
            loc = (ngx_http_ferrule_metrics_loc_t *) node;
            if (loc->refs == 0 && loc->generation != sh->generation) {
                ngx_http_ferrule_metrics_loc_free(fmcf, shpool, sh, loc);
            }
        }
    }

    ngx_shmtx_unlock(&shpool->mutex);
}


static ngx_int_t
ngx_http_ferrule_init_metrics_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_ferrule_metrics_shctx_t  *octx = data;

    ngx_slab_pool_t                   *shpool;
    ngx_http_ferrule_main_conf_t      *fmcf;
    ngx_http_ferrule_metrics_shctx_t  *sh;

    /* the configuration being loaded (ngx_http_ferrule_metrics_zone) */
    fmcf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (octx) {
        /* a reload with the same name (layout) and size keeps every count */
        sh = octx;

    } else if (shm_zone->shm.exists) {
        sh = shpool->data;

    } else {
        sh = ngx_slab_calloc(shpool, sizeof(ngx_http_ferrule_metrics_shctx_t));
        if (sh == NULL) {
            return NGX_ERROR;
        }

        ngx_rbtree_init(&sh->rbtree, &sh->sentinel,
                        ngx_str_rbtree_insert_value);
        ngx_rbtree_init(&sh->locs, &sh->locs_sentinel,
                        ngx_str_rbtree_insert_value);

        shpool->data = sh;
        /* a full zone is counted (dropped), not logged per request */
        shpool->log_nomem = 0;
    }

    shm_zone->data = sh;

    ngx_http_ferrule_metrics_mark(fmcf, shpool, sh);

    return NGX_OK;
}


char *
ngx_http_ferrule_metrics_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_main_conf_t *fmcf = conf;

    u_char     *p;
    ssize_t     size;
    uint32_t    layout;
    ngx_str_t  *value, name;

    if (fmcf->metrics_zone) {
        return "is duplicate";
    }

    value = cf->args->elts;
    size = ngx_parse_size(&value[1]);

    if (size == NGX_ERROR || size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_ferrule_parse_buckets(cf, &value[2], &fmcf->time) != NGX_CONF_OK
        || ngx_http_ferrule_parse_buckets(cf, &value[3], &fmcf->length)
           != NGX_CONF_OK
        || ngx_http_ferrule_parse_buckets(cf, &value[4], &fmcf->size)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    fmcf->slot_len = 4 * (fmcf->time.n + 2) + 2 * (fmcf->length.n + 2)
                     + fmcf->size.n + 1;

    /* the layout names the zone: counters are only ever read as written */
    ngx_crc32_init(layout);
    ngx_crc32_update(&layout, value[2].data, value[2].len);
    ngx_crc32_update(&layout, (u_char *) " ", 1);
    ngx_crc32_update(&layout, value[3].data, value[3].len);
    ngx_crc32_update(&layout, (u_char *) " ", 1);
    ngx_crc32_update(&layout, value[4].data, value[4].len);
    ngx_crc32_final(layout);

    /* "2": the structures of this file (entries with their location's record) */
    name.data = ngx_pnalloc(cf->pool, sizeof("ferrule_metrics_2_ffffffff_99"));
    if (name.data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = ngx_sprintf(name.data, "ferrule_metrics_2_%08xD_%ui", layout,
                    (ngx_uint_t) NGX_HTTP_FERRULE_SLOTS);
    name.len = p - name.data;

    fmcf->metrics_zone = ngx_shared_memory_add(cf, &name, size,
                                               &ngx_http_ferrule_module);
    if (fmcf->metrics_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    fmcf->metrics_zone->init = ngx_http_ferrule_init_metrics_zone;
    /* the init sees the configuration it is loaded with (then the context) */
    fmcf->metrics_zone->data = fmcf;

    /* a location's share: in bytes as the slab takes them, of a typical entry */
    fmcf->metrics_budget = ngx_min(
        (size_t) size / NGX_HTTP_FERRULE_LOC_SHARE,
        NGX_HTTP_FERRULE_LOC_ENTRIES * ngx_http_ferrule_slab_size(
            NGX_HTTP_FERRULE_SLOTS * fmcf->slot_len * sizeof(ngx_atomic_t)
            + sizeof(ngx_http_ferrule_metrics_node_t)
            + NGX_HTTP_FERRULE_KEY_RESERVE));

    /* set by the Lua balancer when it sends a request to a canary backend */
    ngx_str_set(&name, "ferrule_canary");
    fmcf->canary_index = ngx_http_ferrule_index(cf, &name);
    if (fmcf->canary_index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


char *
ngx_http_ferrule_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_loc_conf_t *flcf = conf;

    u_char     *p;
    size_t      len;
    ngx_uint_t  i, j;
    ngx_str_t  *value;

    if (flcf->metrics_labels.len) {
        return "is duplicate";
    }

    value = cf->args->elts;
    len = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        /* tabs and newlines separate the dump's fields */
        for (j = 0; j < value[i].len; j++) {
            if (value[i].data[j] < 0x20 || value[i].data[j] == 0x7f) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "control character in label \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }
        }
        len += value[i].len + 1;
    }

    flcf->metrics_labels.data = ngx_pnalloc(cf->pool, len);
    if (flcf->metrics_labels.data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = flcf->metrics_labels.data;
    for (i = 1; i < cf->args->nelts; i++) {
        if (i > 1) {
            *p++ = '\t';
        }
        p = ngx_cpymem(p, value[i].data, value[i].len);
    }

    flcf->metrics_labels.len = p - flcf->metrics_labels.data;

    return NGX_CONF_OK;
}


/* the bucket of `v` among `b`'s bounds (b->n: +Inf) */
static ngx_inline ngx_uint_t
ngx_http_ferrule_bucket(ngx_http_ferrule_buckets_t *b, double v)
{
    ngx_uint_t  i;

    for (i = 0; i < b->n; i++) {
        if (v <= b->le[i]) {
            break;
        }
    }

    return i;
}


/* adds `v` (ms or bytes) to the histogram at `h`: its sum, then its bucket */
static ngx_inline ngx_atomic_t *
ngx_http_ferrule_observe(ngx_atomic_t *h, ngx_http_ferrule_buckets_t *b,
    double scale, ngx_atomic_uint_t v)
{
    (void) ngx_atomic_fetch_add(&h[0], v);
    (void) ngx_atomic_fetch_add(&h[1 + ngx_http_ferrule_bucket(b, v / scale)],
                                1);
    return h + b->n + 2;
}


/*
 * The status as counted: IANA's registered codes (RFC 9110 and the others
 * the registry names) and NGINX's own as they are, any other as its class.
 */
static ngx_uint_t
ngx_http_ferrule_fold_status(ngx_uint_t status)
{
    ngx_uint_t  i;

    static const struct {
        uint16_t  first;
        uint16_t  last;
    } known[] = {
        { 0, 0 },           /* none (NGINX's $status "000") */
        { 100, 103 },
        { 200, 208 },
        { 226, 226 },
        { 300, 308 },
        { 400, 418 },
        { 421, 426 },
        { 428, 429 },
        { 431, 431 },
        { 444, 444 },       /* NGINX: connection closed without an answer */
        { 451, 451 },
        { 494, 497 },       /* NGINX: header too large, certificate errors */
        { 499, 499 },       /* NGINX: the client closed the connection */
        { 500, 508 },
        { 510, 511 }
    };

    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (status < known[i].first) {
            break;
        }
        if (status <= known[i].last) {
            return status;
        }
    }

    return NGX_HTTP_FERRULE_CLASS + (status < 600 ? status / 100 : 6);
}


/* the status a location's overflow counts `folded` under: its class */
static ngx_uint_t
ngx_http_ferrule_status_class(ngx_uint_t folded)
{
    if (folded == 0 || folded >= NGX_HTTP_FERRULE_CLASS) {
        return folded;
    }

    return NGX_HTTP_FERRULE_CLASS + folded / 100;
}


/* "\t404", "\t4xx", "\txxx" */
static u_char *
ngx_http_ferrule_print_status(u_char *p, ngx_uint_t folded)
{
    if (folded < NGX_HTTP_FERRULE_CLASS) {
        return ngx_sprintf(p, "\t%03ui", folded);
    }

    if (folded == NGX_HTTP_FERRULE_CLASS + 6) {
        return ngx_cpymem(p, "\txxx", 4);
    }

    return ngx_sprintf(p, "\t%uixx", folded - NGX_HTTP_FERRULE_CLASS);
}


/*
 * The record of a worker's location, which it holds from then on; NULL when
 * the zone has no room for it. The lock held.
 */
static ngx_http_ferrule_metrics_loc_t *
ngx_http_ferrule_metrics_hold(ngx_http_ferrule_main_conf_t *fmcf,
    ngx_http_ferrule_loc_conf_t *flcf, ngx_slab_pool_t *shpool,
    ngx_http_ferrule_metrics_shctx_t *sh)
{
    ngx_http_ferrule_metrics_loc_t  *loc;

    if (flcf->metrics_loc == NULL) {
        loc = ngx_http_ferrule_metrics_loc_get(shpool, sh, &flcf->metrics_labels,
                                               fmcf->metrics_generation);
        if (loc) {
            loc->refs++;
            flcf->metrics_loc = loc;
        }
    }

    return flcf->metrics_loc;
}


/* a new entry for `key` in `loc`, NULL when the zone has no room; the lock held */
static ngx_http_ferrule_metrics_node_t *
ngx_http_ferrule_metrics_add(ngx_http_ferrule_main_conf_t *fmcf,
    ngx_slab_pool_t *shpool, ngx_http_ferrule_metrics_shctx_t *sh,
    ngx_http_ferrule_metrics_loc_t *loc, ngx_str_t *key, uint32_t hash,
    size_t size)
{
    size_t                            counters;
    ngx_atomic_t                     *c;
    ngx_http_ferrule_metrics_node_t  *node;

    counters = NGX_HTTP_FERRULE_SLOTS * fmcf->slot_len * sizeof(ngx_atomic_t);

    /* the counters first: aligned as the slab aligns an allocation */
    c = ngx_slab_calloc_locked(shpool, counters + sizeof(*node) + key->len);
    if (c == NULL) {
        return NULL;
    }

    node = (ngx_http_ferrule_metrics_node_t *) ((u_char *) c + counters);
    node->counters = c;
    node->sn.str.len = key->len;
    node->sn.str.data = (u_char *) (node + 1);
    ngx_memcpy(node->sn.str.data, key->data, key->len);
    node->sn.node.key = hash;
    ngx_rbtree_insert(&sh->rbtree, &node->sn.node);
    ngx_queue_insert_tail(&loc->entries, &node->queue);
    loc->bytes += size;
    sh->entries++;
    /* the key, then each counter: up to 20 digits and a separator */
    sh->bound += key->len + 2 + fmcf->slot_len * 21;

    return node;
}


/*
 * The counters of `key` (labels \t canary \t method \t status), added if
 * missing while the location has budget left, else those of `overflow`; NULL
 * when the zone has no room.
 */
static ngx_atomic_t *
ngx_http_ferrule_metrics_entry(ngx_http_ferrule_main_conf_t *fmcf,
    ngx_http_ferrule_loc_conf_t *flcf, ngx_str_t *key, ngx_str_t *overflow)
{
    size_t                             size;
    uint32_t                           hash;
    ngx_slab_pool_t                   *shpool;
    ngx_http_ferrule_metrics_loc_t    *loc;
    ngx_http_ferrule_metrics_node_t   *node;
    ngx_http_ferrule_metrics_shctx_t  *sh;

    shpool = (ngx_slab_pool_t *) fmcf->metrics_zone->shm.addr;
    sh = fmcf->metrics_zone->data;
    hash = ngx_crc32_short(key->data, key->len);

    ngx_shmtx_lock(&shpool->mutex);

    node = (ngx_http_ferrule_metrics_node_t *)
           ngx_str_rbtree_lookup(&sh->rbtree, key, hash);

    if (node == NULL) {
        loc = ngx_http_ferrule_metrics_hold(fmcf, flcf, shpool, sh);
        if (loc == NULL) {
            goto done;
        }

        size = ngx_http_ferrule_slab_size(
                   NGX_HTTP_FERRULE_SLOTS * fmcf->slot_len * sizeof(ngx_atomic_t)
                   + sizeof(ngx_http_ferrule_metrics_node_t) + key->len);

        if (loc->bytes + size <= fmcf->metrics_budget) {
            node = ngx_http_ferrule_metrics_add(fmcf, shpool, sh, loc, key,
                                                hash, size);
            goto done;
        }

        /* no budget left: the overflow of the status class, past the budget
         * (one per class) */
        hash = ngx_crc32_short(overflow->data, overflow->len);
        node = (ngx_http_ferrule_metrics_node_t *)
               ngx_str_rbtree_lookup(&sh->rbtree, overflow, hash);

        if (node == NULL) {
            size = ngx_http_ferrule_slab_size(
                       NGX_HTTP_FERRULE_SLOTS * fmcf->slot_len
                       * sizeof(ngx_atomic_t)
                       + sizeof(ngx_http_ferrule_metrics_node_t)
                       + overflow->len);
            node = ngx_http_ferrule_metrics_add(fmcf, shpool, sh, loc,
                                                overflow, hash, size);
        }
    }

done:

    ngx_shmtx_unlock(&shpool->mutex);

    return node ? node->counters : NULL;
}


/* A worker takes its locations' records as it starts (so that none is freed
 * between the old workers' exit and its first request). */
ngx_int_t
ngx_http_ferrule_metrics_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                         i;
    ngx_slab_pool_t                   *shpool;
    ngx_http_ferrule_loc_conf_t      **flcfs;
    ngx_http_ferrule_main_conf_t      *fmcf;
    ngx_http_ferrule_metrics_shctx_t  *sh;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) {
        return NGX_OK;
    }

    fmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ferrule_module);
    if (fmcf == NULL || fmcf->metrics_zone == NULL
        || fmcf->metrics_zone->data == NULL || fmcf->metrics_locs == NULL)
    {
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) fmcf->metrics_zone->shm.addr;
    sh = fmcf->metrics_zone->data;
    flcfs = fmcf->metrics_locs->elts;

    ngx_shmtx_lock(&shpool->mutex);

    for (i = 0; i < fmcf->metrics_locs->nelts; i++) {
        /* one without room is taken at its first request, if there is then */
        (void) ngx_http_ferrule_metrics_hold(fmcf, flcfs[i], shpool, sh);
    }

    ngx_shmtx_unlock(&shpool->mutex);

    return NGX_OK;
}


/* A worker that exits gives its records back; those of locations that left
 * the configuration go once nobody holds them. */
void
ngx_http_ferrule_metrics_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                         i;
    ngx_slab_pool_t                   *shpool;
    ngx_http_ferrule_loc_conf_t      **flcfs;
    ngx_http_ferrule_main_conf_t      *fmcf;
    ngx_http_ferrule_metrics_loc_t    *loc;
    ngx_http_ferrule_metrics_shctx_t  *sh;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) {
        return;
    }

    fmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ferrule_module);
    if (fmcf == NULL || fmcf->metrics_zone == NULL
        || fmcf->metrics_zone->data == NULL || fmcf->metrics_locs == NULL)
    {
        return;
    }

    shpool = (ngx_slab_pool_t *) fmcf->metrics_zone->shm.addr;
    sh = fmcf->metrics_zone->data;
    flcfs = fmcf->metrics_locs->elts;

    ngx_shmtx_lock(&shpool->mutex);

    for (i = 0; i < fmcf->metrics_locs->nelts; i++) {
        loc = flcfs[i]->metrics_loc;
        if (loc == NULL) {
            continue;
        }

        flcfs[i]->metrics_loc = NULL;

        if (--loc->refs == 0 && loc->generation != sh->generation) {
            ngx_http_ferrule_metrics_loc_free(fmcf, shpool, sh, loc);
        }
    }

    ngx_shmtx_unlock(&shpool->mutex);
}


static ngx_uint_t
ngx_http_ferrule_cache_hash(void *loc, ngx_uint_t method, ngx_uint_t status,
    ngx_str_t *canary)
{
    ngx_uint_t  h;

    h = ((uintptr_t) loc >> 4) * 31 + method * 1009 + status * 7;
    if (canary->len) {
        h ^= ngx_hash_key(canary->data, canary->len);
    }

    return h * 2654435761u;
}


/* the worker's table, doubled when half full (NULL: no memory, or at its limit) */
static ngx_http_ferrule_cached_t *
ngx_http_ferrule_cache_slot(ngx_uint_t hash, void *loc, ngx_uint_t method,
    ngx_uint_t status, ngx_str_t *canary, ngx_uint_t *found)
{
    ngx_uint_t                  i, j, size;
    ngx_http_ferrule_cache_t   *cache = &ngx_http_ferrule_cache;
    ngx_http_ferrule_cached_t  *slots, *c;

    if (cache->slots == NULL || cache->used * 2 >= cache->size) {
        size = cache->size ? cache->size * 2 : 256;

        if (size > 2 * NGX_HTTP_FERRULE_CACHE_MAX) {
            goto lookup;
        }

        slots = ngx_calloc(size * sizeof(ngx_http_ferrule_cached_t),
                           ngx_cycle->log);
        if (slots == NULL) {
            goto lookup;
        }

        for (i = 0; i < cache->size; i++) {
            c = &cache->slots[i];
            if (c->loc == NULL) {
                continue;
            }
            j = ngx_http_ferrule_cache_hash(c->loc, c->method, c->status,
                                            &c->canary);
            while (slots[j & (size - 1)].loc) {
                j++;
            }
            slots[j & (size - 1)] = *c;
        }

        ngx_free(cache->slots);
        cache->slots = slots;
        cache->size = size;
    }

lookup:

    if (cache->slots == NULL) {
        return NULL;
    }

    for (i = hash; /* void */; i++) {
        c = &cache->slots[i & (cache->size - 1)];

        if (c->loc == NULL) {
            *found = 0;
            /* a full table (at its limit): not cached */
            return cache->used * 2 >= cache->size ? NULL : c;
        }

        /* most requests have no canary: no call to memcmp for them */
        if (c->loc == loc && c->method == method && c->status == status
            && c->canary.len == canary->len
            && (canary->len == 0
                || ngx_memcmp(c->canary.data, canary->data, canary->len) == 0))
        {
            *found = 1;
            return c;
        }
    }
}


static ngx_int_t
ngx_http_ferrule_log_handler(ngx_http_request_t *r)
{
    u_char                        *p;
    double                         scale;
    ngx_str_t                      canary, key, overflow, *method;
    ngx_uint_t                     status, hash, found, i, has_upstream;
    ngx_msec_int_t                 ms;
    ngx_time_t                    *tp;
    ngx_atomic_t                  *counters, *h;
    ngx_atomic_uint_t              sent, up_ms[3];
    ngx_http_ferrule_cached_t     *cached;
    ngx_http_upstream_state_t     *state;
    ngx_http_ferrule_loc_conf_t   *flcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_ferrule_module);
    if (flcf->metrics_labels.len == 0) {
        return NGX_OK;
    }

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_ferrule_module);
    if (fmcf->metrics_zone == NULL || fmcf->metrics_zone->data == NULL) {
        return NGX_OK;
    }

    if (r->err_status) {
        status = r->err_status;
    } else {
        status = r->headers_out.status;
    }
    status = ngx_http_ferrule_fold_status(status);

    canary.len = 0;
    canary.data = NULL;
    ngx_http_ferrule_variable(r, fmcf->canary_index, &canary);
    if (canary.len > NGX_HTTP_FERRULE_NAME_MAX) {
        canary.len = 0;
    }

    hash = ngx_http_ferrule_cache_hash(flcf, r->method, status, &canary);
    found = 0;
    cached = ngx_http_ferrule_cache_slot(hash, flcf, r->method, status, &canary,
                                         &found);

    if (found) {
        counters = cached->counters;

    } else {
        /* labels \t canary \t method \t status, and the overflow's
         * (labels \t \t OTHER \t class) */
        method = ngx_http_ferrule_method_name(r->method);
        key.len = flcf->metrics_labels.len + canary.len + method->len
                  + sizeof("\t\t\t999") - 1;
        overflow.len = flcf->metrics_labels.len + sizeof("\t\tOTHER\t999") - 1;
        key.data = ngx_pnalloc(r->pool, key.len + overflow.len);
        if (key.data == NULL) {
            return NGX_OK;
        }

        p = ngx_cpymem(key.data, flcf->metrics_labels.data,
                       flcf->metrics_labels.len);
        *p++ = '\t';
        p = ngx_cpymem(p, canary.data, canary.len);
        *p++ = '\t';
        p = ngx_cpymem(p, method->data, method->len);
        p = ngx_http_ferrule_print_status(p, status);
        key.len = p - key.data;

        overflow.data = p;
        p = ngx_cpymem(p, flcf->metrics_labels.data, flcf->metrics_labels.len);
        p = ngx_cpymem(p, "\t\tOTHER", sizeof("\t\tOTHER") - 1);
        p = ngx_http_ferrule_print_status(p,
                                          ngx_http_ferrule_status_class(status));
        overflow.len = p - overflow.data;

        counters = ngx_http_ferrule_metrics_entry(fmcf, flcf, &key, &overflow);

        /* a series without room now may find some later (a location left) */
        if (cached && counters) {
            cached->canary.data = NULL;
            if (canary.len) {
                cached->canary.data = ngx_alloc(canary.len, ngx_cycle->log);
                if (cached->canary.data == NULL) {
                    goto count;
                }
                ngx_memcpy(cached->canary.data, canary.data, canary.len);
            }
            cached->canary.len = canary.len;
            cached->loc = flcf;
            cached->method = r->method;
            cached->status = status;
            cached->counters = counters;
            ngx_http_ferrule_cache.used++;
        }
    }

count:

    if (counters == NULL) {
        (void) ngx_atomic_fetch_add(
            &((ngx_http_ferrule_metrics_shctx_t *) fmcf->metrics_zone->data)
                 ->dropped, 1);
        return NGX_OK;
    }

    h = counters + (ngx_worker % NGX_HTTP_FERRULE_SLOTS) * fmcf->slot_len;

    tp = ngx_timeofday();
    ms = (ngx_msec_int_t)
             ((tp->sec - r->start_sec) * 1000 + (tp->msec - r->start_msec));
    ms = ngx_max(ms, 0);

    scale = 1000.0;   /* bounds in seconds, sums in ms */
    h = ngx_http_ferrule_observe(h, &fmcf->time, scale, (ngx_atomic_uint_t) ms);

    /* each attempt's times added up (ingress-nginx reads only a single one) */
    has_upstream = 0;
    up_ms[0] = up_ms[1] = up_ms[2] = 0;
    if (r->upstream_states && r->upstream_states->nelts) {
        state = r->upstream_states->elts;
        for (i = 0; i < r->upstream_states->nelts; i++) {
            if (state[i].peer == NULL) {
                continue;
            }
            has_upstream = 1;
            if (state[i].response_time != (ngx_msec_t) -1) {
                up_ms[0] += state[i].response_time;
            }
            if (state[i].connect_time != (ngx_msec_t) -1) {
                up_ms[1] += state[i].connect_time;
            }
            if (state[i].header_time != (ngx_msec_t) -1) {
                up_ms[2] += state[i].header_time;
            }
        }
    }

    if (has_upstream) {
        for (i = 0; i < 3; i++) {
            h = ngx_http_ferrule_observe(h, &fmcf->time, scale, up_ms[i]);
        }

    } else {
        h += 3 * (fmcf->time.n + 2);
    }

    h = ngx_http_ferrule_observe(h, &fmcf->length, 1.0,
                                 (ngx_atomic_uint_t) r->request_length);

    sent = (ngx_atomic_uint_t) r->connection->sent;
    h = ngx_http_ferrule_observe(h, &fmcf->length, 1.0, sent);
    (void) ngx_atomic_fetch_add(
        &h[ngx_http_ferrule_bucket(&fmcf->size, (double) sent)], 1);

    return NGX_OK;
}


ngx_int_t
ngx_http_ferrule_metrics_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt           *h;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);
    if (fmcf->metrics_zone == NULL) {
        /* no ferrule_metrics_zone: nothing changes (ferrule_metrics is inert) */
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_ferrule_log_handler;

    return NGX_OK;
}


static ngx_shm_zone_t *
ngx_http_ferrule_running_metrics(ngx_http_ferrule_main_conf_t **out)
{
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_ferrule_module);
    if (fmcf == NULL || fmcf->metrics_zone == NULL
        || fmcf->metrics_zone->data == NULL)
    {
        return NULL;
    }

    *out = fmcf;
    return fmcf->metrics_zone;
}


/* the size of buffer a dump needs now, or NO_ZONE */
long
ngx_http_ferrule_metrics_bound(void)
{
    ngx_shm_zone_t                *zone;
    ngx_http_ferrule_main_conf_t  *fmcf;

    zone = ngx_http_ferrule_running_metrics(&fmcf);
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    return (long) (((ngx_http_ferrule_metrics_shctx_t *) zone->data)->bound
                   + fmcf->time.text.len + fmcf->length.text.len
                   + fmcf->size.text.len + 256);
}


static u_char *
ngx_http_ferrule_dump_node(ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel,
    ngx_http_ferrule_main_conf_t *fmcf, u_char *p, u_char *last)
{
    ngx_uint_t                        i, s;
    ngx_atomic_uint_t                 v;
    ngx_http_ferrule_metrics_node_t  *n;

    if (node == sentinel || p == NULL) {
        return p;
    }

    p = ngx_http_ferrule_dump_node(node->left, sentinel, fmcf, p, last);
    if (p == NULL) {
        return NULL;
    }

    n = (ngx_http_ferrule_metrics_node_t *) node;

    if ((size_t) (last - p) < n->sn.str.len + 2 + fmcf->slot_len * 21) {
        return NULL;
    }

    p = ngx_cpymem(p, n->sn.str.data, n->sn.str.len);

    for (i = 0; i < fmcf->slot_len; i++) {
        v = 0;
        for (s = 0; s < NGX_HTTP_FERRULE_SLOTS; s++) {
            v += n->counters[s * fmcf->slot_len + i];
        }
        p = ngx_sprintf(p, i ? " %uA" : "\t%uA", v);
    }

    *p++ = '\n';

    return ngx_http_ferrule_dump_node(node->right, sentinel, fmcf, p, last);
}


/*
 * Writes every entry into `buf` (the format: controller/src/scrape.rs): the
 * length written, or NO_ZONE, or TOO_SMALL (ask ngx_http_ferrule_metrics_bound).
 */
long
ngx_http_ferrule_metrics_dump(u_char *buf, size_t size)
{
    u_char                            *p, *last;
    ngx_shm_zone_t                    *zone;
    ngx_slab_pool_t                   *shpool;
    ngx_http_ferrule_main_conf_t      *fmcf;
    ngx_http_ferrule_metrics_shctx_t  *sh;

    zone = ngx_http_ferrule_running_metrics(&fmcf);
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    sh = zone->data;
    shpool = (ngx_slab_pool_t *) zone->shm.addr;
    last = buf + size;

    if (size < fmcf->time.text.len + fmcf->length.text.len
               + fmcf->size.text.len + 128)
    {
        return NGX_HTTP_FERRULE_TOO_SMALL;
    }

    p = ngx_sprintf(buf, "ferrule-metrics 1\ntime %V\nlength %V\nsize %V\n"
                    "dropped %uA\n", &fmcf->time.text, &fmcf->length.text,
                    &fmcf->size.text, sh->dropped);

    ngx_shmtx_lock(&shpool->mutex);
    p = ngx_http_ferrule_dump_node(sh->rbtree.root, sh->rbtree.sentinel, fmcf,
                                   p, last);
    ngx_shmtx_unlock(&shpool->mutex);

    if (p == NULL) {
        return NGX_HTTP_FERRULE_TOO_SMALL;
    }

    return (long) (p - buf);
}


/*
 * ferrule_metrics_dump: the dump over HTTP, for the njs balancer, which cannot
 * call ngx_http_ferrule_metrics_dump as lua/ferrule/metrics.lua does. The handler
 * checks no credentials: the configuration renders it only on the API's unix
 * socket, behind the API's token check (auth_request).
 */
static ngx_int_t
ngx_http_ferrule_push_header(ngx_http_request_t *r, const char *key,
    const char *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value.data = (u_char *) value;
    h->value.len = ngx_strlen(value);

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_metrics_dump_handler(ngx_http_request_t *r)
{
    long          bound, n;
    u_char       *buf;
    ngx_int_t     rc;
    ngx_uint_t    i;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        if (ngx_http_ferrule_push_header(r, "Allow", "GET, HEAD") != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    /*
     * Entries added between sizing the buffer and dumping make it too small:
     * size it again, a few times, as metrics.lua does.
     */
    buf = NULL;
    n = NGX_HTTP_FERRULE_TOO_SMALL;

    for (i = 0; i < 4 && n == NGX_HTTP_FERRULE_TOO_SMALL; i++) {
        if (buf != NULL) {
            ngx_pfree(r->pool, buf);
        }

        bound = ngx_http_ferrule_metrics_bound();
        if (bound < 0) {
            n = bound;
            break;
        }

        buf = ngx_palloc(r->pool, (size_t) bound);
        if (buf == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        n = ngx_http_ferrule_metrics_dump(buf, (size_t) bound);
    }

    if (n < 0) {
        /* no zone is a configuration without metrics (404, as metrics.lua) */
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ferrule: metrics dump: %s",
                      n == NGX_HTTP_FERRULE_NO_ZONE
                      ? "no ferrule_metrics_zone" : "the zone keeps growing");
        return n == NGX_HTTP_FERRULE_NO_ZONE ? NGX_HTTP_NOT_FOUND
                                             : NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    /* counts of this instant: never kept by a cache on the way */
    if (ngx_http_ferrule_push_header(r, "Cache-Control", "no-store") != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = n;
    /* labels are hosts and paths, UTF-8 (as metrics.lua answers) */
    ngx_str_set(&r->headers_out.content_type, "text/plain; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* never empty: the dump starts with its header */
    b->pos = buf;
    b->last = buf + n;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


char *
ngx_http_ferrule_metrics_dump_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_ferrule_metrics_dump_handler;

    return NGX_CONF_OK;
}
