/* Fjord native S3 client: C ABI.
 *
 * A fjord_client owns `threads` io_uring reactor threads (the same runtime as the server) with a
 * pool of keep-alive connections on each, retries retryable failures with backoff and jitter, and
 * splits large transfers into parallel parts (multipart upload) or ranges (ranged GET). Calls are
 * synchronous for the calling thread and thread-safe: any number of threads may call at once; each
 * call runs on one reactor thread (round robin). All structs are owned by the caller; the client
 * keeps no pointer to them after a call returns. Buffers are used in place, never copied.
 *
 * Returns: 0 on success, a negative errno on failure (-ENOENT: no such key or bucket; -EACCES:
 * refused credentials; -EINVAL: bad argument; -ETIMEDOUT: deadline passed; -EIO: transport failure or
 * a server error after retries; -EFBIG: object larger than the buffer; -ENOSPC: server full; -ERANGE:
 * range outside the object). fjord_last_error() describes the last failure on the calling thread.
 */
#ifndef FJORD_CLIENT_H
#define FJORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fjord_client fjord_client;

typedef struct fjord_client_config {
    const char* endpoint; /* "http://127.0.0.1:9000", "127.0.0.1:9000" or "https://..."; required */
    const char* access_key;              /* required */
    const char* secret_key;              /* required */
    const char* region;                  /* NULL: "us-east-1" */
    unsigned threads;                    /* reactor threads; 0: 1 */
    unsigned max_connections_per_thread; /* 0: 16 */
    unsigned max_attempts;               /* per request, first one included; 0: 4 */
    uint64_t request_timeout_ms; /* deadline of one request, all attempts together; 0: 120000 */
    uint64_t io_timeout_ms;      /* bound on one connect / send / receive; 0: 60000 */
    int crc32c_trailer;          /* nonzero: PUT and UploadPart bodies carry a CRC32C trailer */
    const char* ca_cert; /* https: PEM file of the CAs that verify the server; NULL: the system's */
} fjord_client_config;

typedef struct fjord_object_info {
    uint64_t size_bytes; /* object size (head), bytes read (get), bytes written (put) */
    char etag[128];      /* without quotes, NUL-terminated (truncated if longer) */
} fjord_object_info;

typedef struct fjord_transfer_config {
    uint64_t part_size_bytes; /* multipart part / ranged GET range size; 0: 8 MiB */
    unsigned in_flight;       /* parts or ranges in flight at once; 0: 4 */
} fjord_transfer_config;

int fjord_client_create(const fjord_client_config* config, fjord_client** out);
void fjord_client_destroy(fjord_client* client); /* no call may be in flight */

/* Succeeds if the bucket exists afterwards, including when it was already ours. */
int fjord_create_bucket(fjord_client* client, const char* bucket);
/* One PUT of `size` bytes (info may be NULL). */
int fjord_put(fjord_client* client, const char* bucket, const char* key, const void* data,
              uint64_t size, fjord_object_info* info);
/* Reads up to `capacity` bytes of the object from `offset` into `destination`; info->size_bytes says
 * how many (fewer when the object ends first). Large reads go as parallel ranged GETs (transfer may
 * be NULL for the defaults). info may be NULL. */
int fjord_get(fjord_client* client, const char* bucket, const char* key, uint64_t offset,
              void* destination, uint64_t capacity, const fjord_transfer_config* transfer,
              fjord_object_info* info);
/* -ENOENT when the key does not exist. */
int fjord_head(fjord_client* client, const char* bucket, const char* key, fjord_object_info* info);
int fjord_delete(fjord_client* client, const char* bucket, const char* key);
/* Multipart upload with parallel parts (transfer may be NULL for the defaults); aborted on failure. */
int fjord_multipart_put(fjord_client* client, const char* bucket, const char* key, const void* data,
                        uint64_t size, const fjord_transfer_config* transfer,
                        fjord_object_info* info);

/* The message of the last failure on this thread ("" if none); valid until the next call. */
const char* fjord_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FJORD_CLIENT_H */
