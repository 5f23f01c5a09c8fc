package observer

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// cronList answers every periodic entry (client.CronList), by name, with its next tick.
func (s *Server) cronList(c echo.Context) error {
	list, err := s.c.CronList(c.Request().Context())
	if err != nil {
		return err
	}
	slices.SortFunc(list, func(a, b client.CronInfo) int { return strings.Compare(a.Name, b.Name) })
	return c.JSON(http.StatusOK, map[string]any{"entries": list})
}

// cronName is the entry named in the path, or a 400 naming the parameter.
func cronName(c echo.Context) (string, error) {
	name := c.Param("name")
	if err := keys.ValidCronName(name); err != nil {
		return "", fail(http.StatusBadRequest, "bad_name", "name: %v", err)
	}
	return name, nil
}

func (s *Server) cronPause(c echo.Context) error  { return s.setCronPaused(c, true) }
func (s *Server) cronResume(c echo.Context) error { return s.setCronPaused(c, false) }

// setCronPaused pauses or resumes the entry named in the path (client.PauseCron,
// ResumeCron) and answers it as it now is; 404 when there is no such entry.
func (s *Server) setCronPaused(c echo.Context, paused bool) error {
	name, err := cronName(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	set, what := s.c.ResumeCron, "resumed"
	if paused {
		set, what = s.c.PauseCron, "paused"
	}
	if err := set(ctx, name); err != nil {
		if errors.Is(err, client.ErrCronNotFound) {
			return fail(http.StatusNotFound, "not_found", "%s", err)
		}
		return err
	}
	s.log.Info("observer: cron entry "+what, "name", name, "remote", c.Request().RemoteAddr)
	ci, err := s.c.Cron(ctx, name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ci)
}
