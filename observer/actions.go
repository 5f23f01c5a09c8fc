package observer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/dtq/dtq/client"
)

// maxActionBody bounds the JSON body of an action (MaxDeadIDs ids of 128 bytes fit).
const maxActionBody = 2 << 20

// deadBody is the body of the bulk dead actions: ids, or all.
type deadBody struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

// readDeadBody reads and checks a bulk action's body: exactly one of a non-empty ids
// list (each a valid id, at most client.MaxDeadIDs) and "all": true.
func readDeadBody(c echo.Context) (deadBody, error) {
	var b deadBody
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxActionBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return b, fail(http.StatusRequestEntityTooLarge, "body_too_large", "body: over %d bytes", maxActionBody)
		}
		return b, fail(http.StatusBadRequest, "bad_body", "body: %v", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return b, fail(http.StatusBadRequest, "bad_body", `body: want {"ids": ["ID", …]} or {"all": true}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fail(http.StatusBadRequest, "bad_body", `body: %v; want {"ids": ["ID", …]} or {"all": true}`, err)
	}
	if dec.More() {
		return b, fail(http.StatusBadRequest, "bad_body", "body: one JSON object, nothing after it")
	}
	switch {
	case b.All && len(b.IDs) > 0:
		return b, fail(http.StatusBadRequest, "bad_body", `body: "ids" or "all", not both`)
	case !b.All && len(b.IDs) == 0:
		return b, fail(http.StatusBadRequest, "bad_body", `body: want a non-empty "ids" list or "all": true`)
	case len(b.IDs) > client.MaxDeadIDs:
		return b, fail(http.StatusBadRequest, "bad_body", `body: %d ids, at most %d a request`, len(b.IDs), client.MaxDeadIDs)
	}
	for _, id := range b.IDs {
		if client.ValidID(id) != nil {
			return b, fail(http.StatusBadRequest, "bad_id", "ids: %q must match [A-Za-z0-9_.:-]{1,128}", id)
		}
	}
	return b, nil
}

// orEmpty is s, or an empty list for JSON.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// bulkDead reads a bulk action on dead tasks (the queue, and the ids or all) and runs
// it: all when the body says so, some for the ids named.
func (s *Server) bulkDead(c echo.Context, all func(ctx context.Context, q string) (*client.DeadResult, error),
	some func(ctx context.Context, q string, ids []string) (*client.DeadResult, error)) (string, deadBody, *client.DeadResult, error) {
	q, err := s.queueParam(c)
	if err != nil {
		return "", deadBody{}, nil, err
	}
	b, err := readDeadBody(c)
	if err != nil {
		return "", deadBody{}, nil, err
	}
	var res *client.DeadResult
	if b.All {
		res, err = all(c.Request().Context(), q)
	} else {
		res, err = some(c.Request().Context(), q, b.IDs)
	}
	return q, b, res, err
}

// requeueDead requeues the dead tasks named in the body, or all of them.
func (s *Server) requeueDead(c echo.Context) error {
	q, b, res, err := s.bulkDead(c, s.c.RequeueAllDead, s.c.RequeueDead)
	if err != nil {
		return err
	}
	s.log.Info("observer: dead tasks requeued", "queue", q, "all", b.All, "requeued", res.Requeued, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "requeued": res.Requeued,
		"not_found": orEmpty(res.NotFound), "wrong_state": orEmpty(res.WrongState)})
}

// deleteDead deletes the dead tasks named in the body, or all of them.
func (s *Server) deleteDead(c echo.Context) error {
	q, b, res, err := s.bulkDead(c, s.c.DeleteAllDead, s.c.DeleteDead)
	if err != nil {
		return err
	}
	s.log.Info("observer: dead tasks deleted", "queue", q, "all", b.All, "deleted", res.Deleted, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "deleted": res.Deleted, "not_found": orEmpty(res.NotFound)})
}

// deleteOneDead deletes the dead task named in the path: 404 when there is no such
// dead task.
func (s *Server) deleteOneDead(c echo.Context) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	id, err := s.idParam(c)
	if err != nil {
		return err
	}
	res, err := s.c.DeleteDead(c.Request().Context(), q, []string{id})
	if err != nil {
		return err
	}
	if res.Deleted == 0 {
		return fail(http.StatusNotFound, "not_found", "dead task %s in %s: no such dead task", id, q)
	}
	s.log.Info("observer: dead task deleted", "queue", q, "id", id, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"id": id, "queue": q, "status": "deleted"})
}

// runNow queues the scheduled or retrying task named in the path now.
func (s *Server) runNow(c echo.Context) error {
	return s.taskAction(c, s.c.RunNow, "task run now", client.StatusQueued)
}
